"""A run's supervisor: on the head, it owns the launcher for the whole run, outliving whatever
started it (the launch module, Ansible, the controller, its connection).

The launch module writes the run's plan (`run.json`, no secret in it) and these files into the
run's directory, then starts `python3 -S .../_run_supervisor.py RUN_DIR` in a session of its own
with the launcher's environment. From then on the supervisor does what follows a start, watched
or not: it starts the launcher, enforces launch_timeout, stops the run on SIGTERM (`launch_action=stop`,
`torchfleet stop`, Ctrl-C in `torchfleet launch`), names the first rank that failed and quotes
its own log from the node it ran on, ends what is left of a failed, timed-out or stopped run on
every node over the cluster's ssh, and keeps the run's record (_run_record) up to date.

This file also holds the head's ssh fan-out to the other nodes (probe_nodes), which the launch
module uses for its checks. Standard library only: it runs outside Ansible.
"""

from __future__ import annotations

import json
import os
import pkgutil
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from types import SimpleNamespace

try:
    from ansible_collections.torchfleet.cluster.plugins.module_utils import (
        _node_probe, _run_record, _run_report, _slurm)
except ImportError:  # run as a file on the head, beside the files it needs
    import _node_probe  # type: ignore[no-redef]
    import _run_record  # type: ignore[no-redef]
    import _run_report  # type: ignore[no-redef]
    import _slurm  # type: ignore[no-redef]

# The head's checks of the other nodes: seconds for one node to answer, and how many at once
# (each ssh holds three pipes; 64 stays far from a 1024 file limit).
PROBE_TIMEOUT = 20
PROBE_FANOUT = 64
# Seconds an ssh master outlives its last session: it ends by itself if nobody closes it.
MASTER_PERSIST = 60
PLAN_FILE = "run.json"
# The files the supervisor runs from, copied into the run's directory by the launch module.
SOURCES = ("_node_probe", "_run_record", "_run_report", "_run_supervisor", "_slurm")


def module_source(name: str) -> str:
    """The text of one of SOURCES: a plain file beside this one, or a member of the launch
    module's zip under AnsiballZ (where inspect.getsource fails now and then)."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    try:
        with open(here, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return pkgutil.get_data(__name__.rpartition(".")[0], name + ".py").decode()


def probe_command(python: str) -> str:
    # ssh hands the remote side one command line, quoted here; the request travels on stdin.
    # -S: the probe needs the standard library alone, not the environment's site-packages.
    return shlex.join([python, "-S", "-c", module_source("_node_probe")])


def probe_nodes(nodes, head: str, ssh: str, python: str, requests: dict,
                timeout: int = PROBE_TIMEOUT, connect_timeout: int | None = None,
                control_dir: str | None = None) -> dict:
    """_node_probe's answer to each node's request, {name: answer}: here for the head, over the
    cluster's ssh for the others, as the training account, the way mpirun reaches them. A node
    that does not answer within `timeout` seconds (or connect within `connect_timeout`, half of
    it by default) gets {"error": ...}. In parallel, at most PROBE_FANOUT at once: the slowest
    node bounds the wait. With `control_dir`, each connection stays open as an OpenSSH master
    there (see ssh_masters), for the next probe and for mpirun."""
    connect_timeout = connect_timeout or max(1, timeout // 2)
    sharing = ["-o", "ControlMaster=auto", "-o", f"ControlPath={control_dir}/%C",
               "-o", f"ControlPersist={MASTER_PERSIST}"] if control_dir else []
    remote = probe_command(python) if any(node.name != head for node in nodes) else None

    def ask(node):
        if node.name == head:
            try:
                return _node_probe.probe(requests[node.name])
            except OSError as err:
                return {"error": str(err)}
        argv = [ssh, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout}", *sharing,
                node.address, remote]
        try:
            done = subprocess.run(argv, input=json.dumps(requests[node.name]),
                                  capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"error": f"no answer within {timeout} s"}
        try:
            return json.loads(done.stdout)
        except ValueError:
            lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
            return {"error": lines[-1] if lines else f"ssh exited {done.returncode}"}
    if not nodes:
        return {}
    with ThreadPoolExecutor(max_workers=min(PROBE_FANOUT, len(nodes))) as pool:
        return dict(zip((node.name for node in nodes), pool.map(ask, nodes)))


def end_run_on_nodes(nodes, head: str, ssh: str, python: str, run_id: str, grace: int,
                     timeout: int | None = None) -> dict:
    """End what is left of `run_id` on every node but the head (which the module swept itself),
    over the cluster's ssh, as `launch_action=stop` would: TERM, `grace` seconds, KILL. Returns
    {"stopped": {name: [pids]}, "survivors": {name: [pids]}, "silent": [{name, address, error}]}.
    A node that does not answer within 5 s of connecting is silent: a node cut off from the
    network makes no rank fail, the others wait for it in a collective until mpirun gives up its
    daemon (silent_node_timeout) or launch_timeout, and only this tells which node it was."""
    others = [node for node in nodes if node.name != head]
    stop = {"stop": {"run_id": run_id, "grace": grace}}
    # A node's stop takes at most grace + 10 s (the wait after KILL), and a moment to scan.
    answers = probe_nodes(others, head, ssh, python, {node.name: stop for node in others},
                          timeout=timeout or grace + 20, connect_timeout=5)
    ended = {"stopped": {}, "survivors": {}, "silent": []}
    for node in others:
        answer = answers[node.name]
        if "error" in answer:
            ended["silent"].append({"name": node.name, "address": node.address, "error": answer["error"]})
            continue
        for key in ("stopped", "survivors"):
            if answer[key]:
                ended[key][node.name] = [proc["pid"] for proc in answer[key]]
    return ended


def close_ssh_masters(ssh: str, control_dir: str, addresses) -> None:
    """End the masters in `control_dir` (a run's sessions are over by now) and remove it."""
    if ssh and addresses and os.path.isdir(control_dir) and os.listdir(control_dir):
        def close(address):
            try:
                subprocess.run([ssh, "-o", f"ControlPath={control_dir}/%C", "-O", "exit", address],
                               capture_output=True, timeout=10, check=False)
            except subprocess.TimeoutExpired:
                pass  # it ends by itself MASTER_PERSIST seconds after its last session
        with ThreadPoolExecutor(max_workers=min(PROBE_FANOUT, len(addresses))) as pool:
            list(pool.map(close, addresses))
    shutil.rmtree(control_dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------

class _Stop:
    """SIGTERM or SIGINT: stop the run (recorded here, acted on by the wait loop)."""
    signum = None

    @classmethod
    def handler(cls, signum, _frame):
        cls.signum = signum


def stop_launcher(proc, run_id: str, grace: int) -> list[dict]:
    """TERM the launcher's group (mpirun forwards it to every rank on every node), KILL after
    `grace`, then stop whatever of the run is left here: local ranks and torchrun workers run in
    process groups of their own and outlive a killed mpirun. Returns what survived SIGKILL."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except OSError:
        pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
    return _node_probe.end_run(run_id, grace)[1]


def launcher_env() -> dict:
    """The launcher's environment: the supervisor's, without the mark that makes it one."""
    env = dict(os.environ)
    env.pop(_node_probe.SUPERVISOR_VAR, None)
    return env


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_record(plan: dict) -> dict:
    """The record of a run that is starting: what `torchfleet runs` and torchrun_run_info show."""
    return {
        "run_id": plan["run_id"], "state": "running", "rc": None, "duration": None,
        "command": plan["command"], "nodes": [node["name"] for node in plan["nodes"]],
        "slots": [node["slots"] for node in plan["nodes"]], "head": plan["head"],
        "mode": plan["mode"], "nproc": plan["nproc"], "world_size": plan["world_size"],
        "started": now_iso(), "started_at": time.time(), "ended": None,
        "log_dir": plan["paths"]["run"], "launcher_log": plan["paths"]["launcher"],
        "scheduler": plan.get("scheduler", "none"), "job_id": None,
        "supervisor_pid": os.getpid(), "supervisor_start": _run_record.process_start(os.getpid()),
        "boot_id": _run_record.boot_id(), "launcher_pid": None, "timed_out": False,
        "failed_rank": None, "failed_host": None, "failed_exit_code": None, "failed_log": None,
        "failed_log_tail": [], "msg": f"run {plan['run_id']} is running",
    }


class SlurmJob:
    """The run's Slurm job, waited for as a Popen is (wait, returncode); its record follows the
    job's state and Slurm's reason while it is pending."""
    POLL = 0.5  # seconds between two questions to slurmctld

    def __init__(self, run):
        self.run, self.job_id, self.info, self.returncode = run, None, {}, None
        self.pid, self.started, self._next = None, False, 0.0

    def submit(self, env: dict) -> None:
        self.job_id = _slurm.submit(self.run.plan["sbatch"], env, self.run.plan["cwd"])
        self.run.save(job_id=self.job_id, job_state="PENDING",
                      msg=f"run {self.run.plan['run_id']} is Slurm job {self.job_id}, submitted")

    def wait(self, timeout: float):
        now = time.monotonic()
        if now < self._next:
            time.sleep(min(timeout, self._next - now))
            raise subprocess.TimeoutExpired("scontrol", timeout)
        self._next = now + self.POLL
        info = _slurm.job(self.job_id)
        if info is None:  # Slurm forgot the job (MinJobAge): it ended, how is not known
            self.returncode = 1
            return self.returncode
        if info:
            self.update(info)
            if info.get("JobState") in _slurm.ENDED:
                self.returncode = _slurm.returncode(info)
                return self.returncode
        raise subprocess.TimeoutExpired("scontrol", timeout)

    def update(self, info: dict) -> None:
        state, reason = info.get("JobState"), info.get("Reason")
        if (state, reason) == (self.info.get("JobState"), self.info.get("Reason")):
            return
        self.info = info
        changes = {"job_state": state, "job_reason": reason,
                   "msg": f"run {self.run.plan['run_id']} is Slurm job {self.job_id}: {state}"
                          + (f" ({reason})" if reason and reason != "None" else "")}
        # Started: running now, or ended after running a while (a pending job cancelled never was).
        ran = state in ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED") or (
            state in _slurm.ENDED and info.get("RunTime", "00:00:00") != "00:00:00")
        if ran and not self.started:
            self.started = True
            changes.update(batch_host=info.get("BatchHost"), job_nodes=_slurm.hostnames(info.get("NodeList", "")))
            changes.update(self.run.nodes_of_allocation(changes["job_nodes"]))
        self.run.save(**changes)

    def cancel(self, grace: int) -> None:
        """scancel, then wait until Slurm says the job is over (its KillWait, and a margin)."""
        _slurm.cancel(self.job_id)
        deadline = time.monotonic() + grace + 60
        while time.monotonic() < deadline:
            try:
                self.wait(1)
                return
            except subprocess.TimeoutExpired:
                pass
        self.returncode = -signal.SIGKILL


class Run:
    """One run, from the plan the launch module wrote into its directory."""

    def __init__(self, run_dir: str):
        with open(os.path.join(run_dir, PLAN_FILE), encoding="utf-8") as handle:
            self.plan = json.load(handle)
        self.run_dir = run_dir
        self.nodes = [SimpleNamespace(**node) for node in self.plan["nodes"]]
        self.record = new_record(self.plan)

    def save(self, **changes) -> None:
        self.record.update(changes)
        _run_record.write_state(self.run_dir, self.record)

    def ask(self, nodes, requests: dict, **kwargs) -> dict:
        plan = self.plan
        return probe_nodes(nodes, plan["head"], plan["ssh"], plan["python"], requests,
                           control_dir=plan["control_dir"], **kwargs)

    def read_log(self, host: str, pattern: str):
        """(path, last lines) of a log on the node that wrote it; (None, []) where unreachable."""
        node = next((node for node in self.nodes if node.name == host), None)
        if node is None or (node.name != self.plan["head"] and not self.plan["check_nodes"]):
            return None, []
        request = {"tail": {"pattern": pattern, "lines": _run_report.TAIL_LINES}}
        answer = self.ask([node], {host: request}, timeout=PROBE_TIMEOUT, connect_timeout=5)[host]
        found = answer.get("tail") or {}
        return found.get("path"), found.get("lines", [])

    def nodes_of_allocation(self, names: list[str]) -> dict:
        """The inventory's nodes in the allocation's order (where each Slurm node name resolves to
        a node's address), so ranks are named by the node they ran on; {} where they do not map."""
        by_address = {node.address: node for node in self.nodes}
        try:
            order = [by_address.get(socket.gethostbyname(name)) for name in names]
        except OSError:
            return {}
        if not names or None in order:
            return {}
        self.nodes = order
        return {"nodes": [node.name for node in order], "slots": [node.slots for node in order]}

    def start(self):
        plan, paths = self.plan, self.plan["paths"]
        env = launcher_env()
        log = os.open(paths["launcher"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
        try:
            # A session of its own: one killpg reaches the launcher and what it started here.
            return subprocess.Popen(plan["argv"], env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True, cwd=plan["cwd"])
        finally:
            os.close(log)

    def supervise(self) -> dict:
        plan, paths, run_id = self.plan, self.plan["paths"], self.plan["run_id"]
        grace, timeout = plan["stop_grace"], plan["launch_timeout"]
        slurm = plan.get("scheduler") == "slurm"
        self.save()
        try:
            if slurm:
                proc = SlurmJob(self)
                proc.submit(launcher_env())
            else:
                proc = self.start()
        except (OSError, subprocess.SubprocessError, _slurm.SlurmError) as err:
            self.save(state="failed", rc=127, ended=now_iso(), duration=0.0,
                      msg=f"cannot start {plan['argv'][0]}: {err}" if not slurm else str(err))
            return self.record
        started = time.monotonic()
        self.save(launcher_pid=proc.pid)
        timed_out, survivors, warnings = False, [], []
        while True:
            try:
                proc.wait(timeout=0.1)  # the run's end is seen within 0.1 s
                break
            except subprocess.TimeoutExpired:
                pass
            timed_out = bool(timeout) and time.monotonic() - started >= timeout
            if timed_out or _Stop.signum is not None:
                if slurm:
                    waiting = (proc.info.get("JobState"), proc.info.get("Reason"))  # before scancel
                    proc.cancel(grace)
                    survivors = _node_probe.end_run(run_id, grace)[1]
                else:
                    survivors = stop_launcher(proc, run_id, grace)
                break
        if not (timed_out or _Stop.signum):
            # The launcher is gone; nothing of the run should be left on the head.
            leftovers, survivors = _node_probe.end_run(run_id, grace)
            if leftovers:
                warnings.append(f"{len(leftovers)} process(es) of run {run_id} outlived the "
                                f"launcher on the head and were stopped")
        rc = _run_report.exit_status(proc.returncode)
        result = {"rc": rc, "duration": round(time.monotonic() - started, 3), "timed_out": timed_out,
                  "warnings": warnings, "stdout_tail": _run_report.read_tail(paths["launcher"]),
                  "rank0_tail": _run_report.rank0_tail(plan["mode"], paths)}
        # After a run that failed or was stopped, nothing of it may stay on any node. Open MPI
        # ends the ranks it started, but torchrun's workers, in process groups of their own, can
        # outlive a daemon that lost its mpirun. PALS nodes take no ssh (check_nodes false).
        ended = None
        if (rc != 0 or timed_out or _Stop.signum) and plan["check_nodes"] and len(self.nodes) > 1:
            ended = end_run_on_nodes(self.nodes, plan["head"], plan["ssh"], plan["python"], run_id,
                                     grace)
            result.update(stopped_on_nodes=ended["stopped"],
                          silent_nodes=[node["name"] for node in ended["silent"]])
        left = _run_report.cleanup_message(ended, name_silent=not timed_out) if ended else ""
        if timed_out:
            # Which nodes still answer tells a node gone silent from a run that hung by itself.
            silent = ended["silent"] if ended else None
            state = "timed_out"
            msg = _run_report.timeout_message(run_id, timeout, grace, silent, paths["run"]) + left
            if slurm and not proc.started:
                msg = (f"Slurm job {proc.job_id} of run {run_id} never started within launch_timeout "
                       f"({timeout} s): it stayed {waiting[0]} ({waiting[1]}), and was cancelled")
        elif _Stop.signum:
            state = "stopped"
            msg = (f"run {run_id} was stopped ({signal.Signals(_Stop.signum).name} to its "
                   f"supervisor: launch_action=stop, torchfleet stop or Ctrl-C); logs under {paths['run']}{left}")
        elif rc != 0:
            state = "failed"
            failure = _run_report.describe_failure(
                _node_probe.read_end(paths["launcher"]), self.nodes, plan["mode"], paths,
                plan["nproc"], read_log=self.read_log)
            result.update(failure)
            msg = _run_report.failure_message(run_id, rc, failure, paths) + left
            if slurm and proc.info.get("JobState") not in ("COMPLETED", "FAILED"):
                msg = f"Slurm ended job {proc.job_id}: {proc.info.get('JobState')} " \
                      f"({proc.info.get('Reason')}); {msg}"
        else:
            state, msg = "succeeded", f"run {run_id} succeeded"
        if survivors:
            pids = [proc_["pid"] for proc_ in survivors]
            result["survivors"] = pids
            msg += (f"; processes {', '.join(map(str, pids))} of run {run_id} survived SIGKILL on "
                    f"the head; check them (uninterruptible I/O?)")
        if plan["control_dir"]:
            close_ssh_masters(plan["ssh"], plan["control_dir"],
                              [node.address for node in self.nodes if node.name != plan["head"]])
        self.save(state=state, msg=msg, ended=now_iso(), **result)
        return self.record


def start(python: str, path: str, run_dir: str, env: dict) -> subprocess.Popen:
    """Start the supervisor (this file at `path`) for the run in run_dir, in a session of its own
    so that no signal meant for its starter reaches it, its output in the run's supervisor.log."""
    log = os.open(os.path.join(run_dir, "supervisor.log"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
    try:
        return subprocess.Popen([python, "-S", path, run_dir], env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=run_dir)
    finally:
        os.close(log)


def main(argv: list[str]) -> int:
    run_dir = argv[0]
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _Stop.handler)
    # A terminal closing, or the connection that started the module going, is not a stop.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    run = Run(run_dir)
    try:
        record = run.supervise()
    except Exception as err:  # noqa: BLE001 - recorded, so the run never reads as running
        run.save(state="failed", ended=now_iso(),
                 msg=f"the supervisor of run {run.plan['run_id']} failed: {type(err).__name__}: {err}; "
                     f"see supervisor.log in {run_dir}, and end what is left with {_run_report.STOP_HINT}")
        raise
    return 0 if record["state"] == "succeeded" else 1


if __name__ == "__main__":
    # Run as its own program on the head, not inside a module: an exit status, not exit_json.
    raise SystemExit(main(sys.argv[1:]))
