"""A run's supervisor: on the head, it owns the launcher for the whole run, outliving whatever
started it (the launch module, Ansible, the controller, its connection).

The launch module writes the run's plan (`run.json`, a SupervisorPlan, no secret in it) and this
package into the run's directory (`supervisor/_head/`), then starts `python3 -S -m
_head.supervisor RUN_DIR` from `supervisor/`, in a session of its own with the launcher's
environment. From then on the supervisor does what follows a start, watched or not: it starts the
launcher, enforces launch_timeout, stops the run on SIGTERM (`launch_action=stop`, `torchfleet
stop`, Ctrl-C in `torchfleet launch`), names the first rank that failed and quotes its own log
from the node it ran on, ends what is left of a failed, timed-out or stopped run on every node
over the cluster's ssh, and keeps the run's record (state.json, a RunRecord) up to date. Standard
library only: it runs outside Ansible.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from types import MappingProxyType, SimpleNamespace

from . import report, slurm
from .fanout import PROBE_FANOUT, PROBE_TIMEOUT, close_ssh_masters, end_run_on_nodes, nodes_without_ranks, probe_nodes
from .probe import SUPERVISOR_VAR, end_run, read_end
from .record import (STATE_FILE, RunRecord, SupervisorPlan, boot_id, process_start, release_space, reserve_space,
                     write_state)

RESTART_VAR = "TORCHFLEET_RESTART_COUNT"  # the attempt's number, for the script (0: the first)
START_FIRST_LOOK = 5.0  # seconds from the launcher's start to the start watch's first look
START_POLL = 1.0  # seconds between the start watch's later looks at the nodes
HEARTBEAT_EVERY = 3.0  # seconds between the heartbeat's looks at the other nodes
LOST_LAUNCHER_GRACE = 2.0  # seconds mpirun has to pass a TERM on once a node is lost
SSH_EVERY = 4.0  # seconds between the hung-node watch's `ssh NODE true` rounds
# Where the heartbeat knocks: port 1, closed everywhere, so the node's kernel refuses it and no
# program sees it (no log line every 3 s); else, where a firewall drops it, the ssh port.
HEARTBEAT_PORTS = (1, 22)


def node_answers(address: str, port: int, timeout: float = HEARTBEAT_EVERY) -> bool:
    """Whether the node's kernel answers on the cluster network: a TCP connection, or a refusal
    (an answer too). No process starts on the node, so a node whose CPUs the training saturates
    still answers; one cut off, powered off or crashed does not."""
    try:
        socket.create_connection((address, port), timeout=timeout).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return True


def heartbeat_port(address: str) -> int | None:
    """The first of HEARTBEAT_PORTS the node answers on; None if it answers on none."""
    return next((port for port in HEARTBEAT_PORTS if node_answers(address, port)), None)


class _Stop:
    """SIGTERM or SIGINT: stop the run (recorded here, acted on by the wait loop)."""
    signum = None

    @classmethod
    def handler(cls, signum, _frame):
        cls.signum = signum


def stop_launcher(proc, run_id: str, grace: int, launcher_grace: float | None = None) -> list[dict]:
    """TERM the launcher's group (mpirun forwards it to every rank on every node), KILL after
    `grace` (the launcher's own wait: `launcher_grace` where given), then stop whatever of the run
    is left here: local ranks and torchrun workers run in process groups of their own and outlive
    a killed mpirun. Returns what survived SIGKILL."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except OSError:
        pass
    try:
        proc.wait(timeout=grace if launcher_grace is None else launcher_grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
    return end_run(run_id, grace, spare_guardian=True)[1]


def launcher_env() -> dict:
    """The launcher's environment: the supervisor's, without the mark that makes it one."""
    env = dict(os.environ)
    env.pop(SUPERVISOR_VAR, None)
    return env


def now_iso(at: float | None = None) -> str:
    """UTC, ISO 8601, of now or of the time.time() `at`."""
    when = datetime.now(timezone.utc) if at is None else datetime.fromtimestamp(at, timezone.utc)
    return when.isoformat(timespec="seconds")


def new_record(plan: SupervisorPlan) -> RunRecord:
    """The record of a run that is starting: what `torchfleet runs` and torchrun_run_info show."""
    return RunRecord(
        run_id=plan.run_id, command=plan.command, nodes=[node["name"] for node in plan.nodes],
        slots=[node["slots"] for node in plan.nodes], head=plan.head, mode=plan.mode,
        nproc=plan.nproc, world_size=plan.world_size, started=now_iso(), started_at=time.time(),
        log_dir=plan.paths["run"], launcher_log=plan.paths["launcher"], scheduler=plan.scheduler,
        supervisor_pid=os.getpid(), supervisor_start=process_start(os.getpid()), boot_id=boot_id(),
        msg=f"run {plan.run_id} is running")


class SlurmJob:
    """The run's Slurm job, waited for as a Popen is (wait, returncode); its record follows the
    job's state and Slurm's reason while it is pending."""
    POLL = 0.5  # seconds between two questions to slurmctld

    def __init__(self, run):
        self.run, self.job_id, self.info, self.returncode = run, None, {}, None
        self.pid, self.started, self._next = None, False, 0.0
        self.latest: dict = {}  # scontrol's last answer (info: as last recorded)

    def submit(self, env: dict) -> None:
        self.job_id = slurm.submit(self.run.plan.sbatch, env, self.run.plan.cwd)
        self.run.save(job_id=self.job_id, job_state="PENDING",
                      msg=f"run {self.run.plan.run_id} is Slurm job {self.job_id}, submitted")

    def wait(self, timeout: float):
        now = time.monotonic()
        if now < self._next:
            time.sleep(min(timeout, self._next - now))
            raise subprocess.TimeoutExpired("scontrol", timeout)
        self._next = now + self.POLL
        info = slurm.job(self.job_id)
        self.latest = info or self.latest
        if info is None:  # Slurm forgot the job (MinJobAge): it ended, how is not known
            self.returncode = 1
            return self.returncode
        if info:
            self.update(info)
            if info.get("JobState") in slurm.ENDED:
                self.returncode = slurm.returncode(info)
                return self.returncode
        raise subprocess.TimeoutExpired("scontrol", timeout)

    def update(self, info: dict) -> None:
        state, reason = info.get("JobState"), info.get("Reason")
        if (state, reason) == (self.info.get("JobState"), self.info.get("Reason")):
            return
        self.info = info
        changes = {"job_state": state, "job_reason": reason,
                   "msg": f"run {self.run.plan.run_id} is Slurm job {self.job_id}: {state}"
                          + (f" ({reason})" if reason and reason != "None" else "")}
        # Started: running now, or ended after running a while (a pending job cancelled never was).
        ran = state in ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED") or (
            state in slurm.ENDED and info.get("RunTime", "00:00:00") != "00:00:00")
        if ran and not self.started:
            self.started = True
            changes.update(batch_host=info.get("BatchHost"), job_nodes=slurm.hostnames(info.get("NodeList", "")))
            mapped = self.run.nodes_of_allocation(changes["job_nodes"])
            changes.update(mapped)
            if mapped:  # a restart's --exclude names a lost node as Slurm does
                self.run.slurm_names.update(zip(mapped["nodes"], changes["job_nodes"]))
            if self.run.attempts:  # the attempt's nodes in rank order, once known: the follower reads them
                self.run.attempts[-1].update(nodes=mapped.get("nodes", self.run.attempts[-1]["nodes"]),
                                             job_id=self.job_id, job_nodes=changes["job_nodes"])
                changes["attempts"] = self.run.attempts
        self.run.save(**changes)

    def cancel(self, grace: int, lost=()) -> str | None:
        """scancel (retried), then wait until Slurm says the job is over (its KillWait, and a
        margin), or holds only `lost` nodes (Slurm names) still: a dead node's part ends only when
        Slurm declares the node down (SlurmdTimeout, minutes), and the other nodes are free
        already. What went wrong, if anything, for the record's warnings."""
        try:
            slurm.cancel(self.job_id)
        except slurm.SlurmError as err:
            self.returncode = -signal.SIGKILL
            return str(err)
        deadline = time.monotonic() + grace + 60
        while time.monotonic() < deadline:
            try:
                self.wait(1)
                return
            except subprocess.TimeoutExpired:
                pass
            held = self.latest.get("NodeList", "")
            if lost and self.latest.get("JobState") == "COMPLETING" and set(slurm.hostnames(held)) <= set(lost):
                self.returncode = -signal.SIGTERM
                return None
        self.returncode = -signal.SIGKILL
        return (f"Slurm job {self.job_id} was cancelled but still not over after {grace + 60} s: "
                f"check it with squeue -j {self.job_id}")


class Run:
    """One run, from the plan the launch module wrote into its directory."""

    def __init__(self, run_dir: str):
        self.plan = SupervisorPlan.read(run_dir)
        self.run_dir = run_dir
        self.nodes = [SimpleNamespace(**node) for node in self.plan.nodes]
        self.record = new_record(self.plan)
        self.ended = threading.Event()  # the launcher is gone: the watches stop looking
        self.heartbeat_ports: dict = {}  # {node: the port it answers the heartbeat on}
        self.attempts: list = []  # with restarts: each attempt, as the record lists it
        if self.plan.first_attempt:
            with open(os.path.join(run_dir, STATE_FILE), encoding="utf-8") as handle:
                self.attempts = earlier_attempts(json.load(handle), self.plan)
            self.record = self.record.updated(started=self.attempts[0]["started"])
        self.launcher_env: dict = {}  # a restart's environment over the supervisor's
        self.slurm_names: dict = {}  # {inventory name: Slurm's}, from each allocation
        self.silent: dict = {}  # after an attempt that failed: the nodes that did not answer then

    def save(self, final: bool = False, required: bool = False, **changes) -> None:
        """Write the record. Along the run a full disk skips a write (the next one says more),
        unless the module waits for it (`required`: the start, the launcher's pid); the last one
        takes the space kept for it (reserve_space) rather than fail."""
        self.record = self.record.updated(**changes)
        try:
            write_state(self.run_dir, self.record.to_dict())
        except OSError as err:
            if required and not final:
                raise
            if not final:
                sys.stderr.write(f"cannot write the run's record now: {err}\n")  # supervisor.log
                return
            release_space(self.run_dir)
            write_state(self.run_dir, self.record.to_dict())
        if final:
            release_space(self.run_dir)

    def ask(self, nodes, requests: dict, **kwargs) -> dict:
        plan = self.plan
        return probe_nodes(nodes, plan.head, plan.ssh, plan.python, requests,
                           control_dir=plan.control_dir, **kwargs)

    def read_log(self, host: str, pattern: str):
        """(path, last lines) of a log on the node that wrote it; (None, []) where unreachable."""
        node = next((node for node in self.nodes if node.name == host), None)
        if node is None or node.name in self.silent or (node.name != self.plan.head and not self.plan.check_nodes):
            return None, []
        request = {"tail": {"pattern": pattern, "lines": report.TAIL_LINES}}
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

    def start(self, append: bool = False):
        plan, paths = self.plan, self.plan.paths
        env = dict(launcher_env(), **self.launcher_env)
        flags = os.O_APPEND if append else os.O_CREAT | os.O_EXCL  # a restart adds to the log
        log = os.open(paths["launcher"], os.O_WRONLY | flags, 0o640)
        try:
            # A session of its own: one killpg reaches the launcher and what it started here.
            return subprocess.Popen(plan.argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True, cwd=plan.cwd)
        finally:
            os.close(log)

    def watch_start(self, launcher_pid: int, seconds: int, late: list) -> None:
        """In a thread: until a process of the run runs on every node the head checks, look every
        START_POLL s; past `seconds`, put the nodes where none started in `late`, which ends the
        run (a daemon that cannot call back would keep mpirun waiting for ever)."""
        nodes = self.nodes if self.plan.check_nodes else [n for n in self.nodes if n.name == self.plan.head]
        deadline = time.monotonic() + seconds
        launchers = {os.getpid(), launcher_pid}
        # The first look waits: most runs have started everywhere by then, and a short one has
        # ended, and costs no probe of every node.
        if self.ended.wait(min(START_FIRST_LOOK, seconds)):
            return
        while _Stop.signum is None and not self.ended.is_set():
            left = max(1, int(deadline - time.monotonic()))
            missing = nodes_without_ranks(nodes, self.plan.head, self.plan.ssh, self.plan.python,
                                          self.plan.run_id, launchers, self.plan.control_dir,
                                          timeout=min(PROBE_TIMEOUT, left))
            if not missing:
                return
            if time.monotonic() >= deadline:
                late.extend(missing)
                return
            self.ended.wait(START_POLL)

    def watch_nodes(self, seconds: int, lost: dict, unanswered: dict) -> None:
        """In a thread, for the whole run: every HEARTBEAT_EVERY s, whether each other node
        answers (node_answers). A node silent for `seconds` goes into `lost` ({name: since},
        which ends the run, naming it); one silent for less is in `unanswered`, for the report of
        a run that failed meanwhile. Nodes that did not answer at the start are not watched."""
        others = [node for node in self.nodes if node.name != self.plan.head]
        with ThreadPoolExecutor(max_workers=min(PROBE_FANOUT, len(others))) as pool:
            ports = dict(zip((node.name for node in others), pool.map(lambda n: heartbeat_port(n.address), others)))
            self.heartbeat_ports = ports
            watched = [node for node in others if ports[node.name]]
            seen = {node.name: time.monotonic() for node in watched}
            while not self.ended.is_set() and watched:
                began = time.monotonic()
                for node, ok in zip(watched, pool.map(lambda n: node_answers(n.address, ports[n.name]), watched)):
                    if ok:
                        seen[node.name] = began
                        unanswered.pop(node.name, None)
                        continue
                    since = now_iso(time.time() - (time.monotonic() - seen[node.name]))
                    unanswered.setdefault(node.name, since)
                    if time.monotonic() - seen[node.name] >= seconds:
                        lost.setdefault(node.name, since)
                self.ended.wait(max(0.0, HEARTBEAT_EVERY - (time.monotonic() - began)))

    def silent_nodes(self, unanswered: dict) -> dict:
        """{name: since} of the other nodes that do not answer the knock now (on the port each
        answered the heartbeat on), with those the heartbeat already found silent."""
        silent, ports = dict(unanswered), self.heartbeat_ports

        def answers(node):
            port = ports.get(node.name)
            return node_answers(node.address, port) if port else heartbeat_port(node.address) is not None
        others = [node for node in self.nodes if node.name != self.plan.head and node.name not in silent]
        with ThreadPoolExecutor(max_workers=min(PROBE_FANOUT, len(others) or 1)) as pool:
            answered = list(pool.map(answers, others))
        silent.update((node.name, now_iso()) for node, ok in zip(others, answered) if not ok)
        return silent

    def runs_true(self, node, timeout: float) -> bool:
        """Whether `node` runs `true` over the cluster's ssh within `timeout` seconds (over the
        launch's ssh master where there is one): alive, not only its kernel."""
        plan = self.plan
        sharing = ["-o", f"ControlPath={plan.control_dir}/%C"] if plan.control_dir else []
        try:
            return subprocess.run([plan.ssh, "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", *sharing,
                                   node.address, "true"], capture_output=True, timeout=timeout,
                                  check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def watch_hung(self, seconds: int, lost: dict) -> None:
        """In a thread, for the whole run: a node whose kernel answers the knock but where nothing
        runs any more (hung, frozen) is found by a command it must run: every SSH_EVERY s, `ssh
        NODE true` (over the launch's ssh master where there is one). A node that ran it once and
        has not for `seconds` goes into `lost`, which ends the run, naming it."""
        others = [node for node in self.nodes if node.name != self.plan.head]
        seen: dict = {}
        with ThreadPoolExecutor(max_workers=min(PROBE_FANOUT, len(others))) as pool:
            while not self.ended.is_set():
                began = time.monotonic()
                for node, ok in zip(others, pool.map(lambda n: self.runs_true(n, seconds), others)):
                    if ok:
                        seen[node.name] = began
                    elif node.name in seen and time.monotonic() - seen[node.name] >= seconds:
                        lost.setdefault(node.name, now_iso(time.time() - (time.monotonic() - seen[node.name])))
                self.ended.wait(max(0.0, SSH_EVERY - (time.monotonic() - began)))

    def supervise(self) -> RunRecord:
        """The run, attempt after attempt (max_restarts), to its last record."""
        plan = self.plan
        reserve_space(self.run_dir)
        self.save(required=True, attempts=self.attempts or None, restarts=len(self.attempts))
        attempt, begun = plan.first_attempt, time.monotonic()
        if attempt:  # restarted by hand: the nodes that answer, fenced, as after a failure
            nodes = self.nodes_for_restart()
            if isinstance(nodes, str):
                state = "stopped" if _Stop.signum is not None else "failed"
                self.save(final=True, state=state, ended=now_iso(), rc=143 if state == "stopped" else 1,
                          msg=f"run {plan.run_id} was not restarted: {nodes}")
                return self.record
            self.next_attempt(attempt, nodes, self.attempts[-1]["cause"])
        while True:
            ended = self.attempt(attempt, begun)
            if ended is None:  # its launcher could not start: recorded
                return self.record
            state, msg, result, cause = ended
            if cause is None or attempt - plan.first_attempt >= plan.max_restarts or _Stop.signum is not None:
                break
            self.attempts[-1].update(ended=now_iso(), cause=cause)
            self.save(attempts=self.attempts, msg=f"attempt {attempt} of run {plan.run_id} ended ({cause}); "
                                                  f"waiting for {plan.min_nodes} node(s) to answer")
            nodes = self.nodes_for_restart()
            if isinstance(nodes, str):
                if _Stop.signum is not None:
                    state, result["rc"] = "stopped", result.get("rc") or 143
                msg = f"{msg}; no restart: {nodes}"
                break
            attempt += 1
            self.next_attempt(attempt, nodes, cause)
        if self.attempts:
            self.attempts[-1].update(ended=now_iso(), cause="" if state == "succeeded" else (cause or msg))
            result.update(attempts=self.attempts, restarts=len(self.attempts) - 1)
        if self.plan.control_dir:
            close_ssh_masters(self.plan.ssh, self.plan.control_dir,
                              [node.address for node in self.nodes if node.name != self.plan.head])
        self.save(final=True, state=state, msg=msg, ended=now_iso(), **result)
        return self.record

    def attempt(self, attempt: int, begun: float):
        """One attempt of the run: its launcher from start to end, and the clean-up after it.
        (state, message, record changes, cause) where `cause` says why a failure a restart can
        help happened (None for any other end); None where the launcher could not start."""
        plan, paths, run_id = self.plan, self.plan.paths, self.plan.run_id
        grace, timeout = plan.stop_grace, plan.launch_timeout
        slurm_job = plan.scheduler == "slurm"
        try:
            if slurm_job:
                proc = SlurmJob(self)
                proc.submit(launcher_env())
            else:
                proc = self.start(append=attempt > 0)
        except (OSError, subprocess.SubprocessError, slurm.SlurmError) as err:
            self.save(final=True, state="failed", rc=127, ended=now_iso(), duration=0.0,
                      msg=f"cannot start {plan.argv[0]}: {err}" if not slurm_job else str(err))
            return None
        started = begun  # launch_timeout and the duration are the whole run's, every attempt in it
        if plan.max_restarts or plan.first_attempt:
            self.attempts.append({"attempt": attempt, "started": now_iso(), "ended": None,
                                  "nodes": [node.name for node in self.nodes],
                                  "world_size": plan.world_size, "cause": None,
                                  "workers": paths.get("workers") or None})
            self.save(attempts=self.attempts, restarts=attempt)
        self.save(required=True, launcher_pid=proc.pid)
        timed_out, survivors, warnings, watched, late, stopped = False, [], [], [], [], None
        if plan.start_timeout and not slurm_job:
            threading.Thread(target=self.watch_start, args=(proc.pid, plan.start_timeout, watched),
                             daemon=True).start()
        lost, unanswered, gone = {}, {}, {}
        watching = bool(plan.heartbeat_timeout and plan.check_nodes and len(self.nodes) > 1)
        watched_nodes = False
        while True:
            # A Slurm job's nodes are watched once it runs (they are the allocation's then).
            if watching and not watched_nodes and (not slurm_job or proc.started):
                watched_nodes = True
                threading.Thread(target=self.watch_nodes, args=(plan.heartbeat_timeout, lost, unanswered),
                                 daemon=True).start()
                if plan.ssh:
                    threading.Thread(target=self.watch_hung, args=(plan.heartbeat_timeout, lost),
                                     daemon=True).start()
            try:
                proc.wait(timeout=0.1)  # the run's end is seen within 0.1 s
                break
            except subprocess.TimeoutExpired:
                pass
            timed_out = bool(timeout) and time.monotonic() - started >= timeout
            late = list(watched)  # as the watch said it when the run was ended, never later
            gone = dict(lost)
            stopped = _Stop.signum  # a stop heard after the launcher's end changes nothing of it
            if timed_out or late or gone or stopped is not None:
                if gone:  # said at once: the end takes the stop's grace and the clean-up
                    self.save(lost_nodes=gone)
                if slurm_job:
                    waiting = (proc.info.get("JobState"), proc.info.get("Reason"))  # before scancel
                    unsure = proc.cancel(grace, lost=[self.slurm_names[name] for name in gone
                                                      if name in self.slurm_names])
                    if unsure:
                        warnings.append(unsure)
                    survivors = end_run(run_id, grace, spare_guardian=True)[1]
                else:
                    # With a node gone, mpirun waits for ever for that node's daemon: it has a
                    # moment to pass the TERM on, and the ranks on the other nodes their own grace
                    # (the clean-up below).
                    survivors = stop_launcher(proc, run_id, grace, launcher_grace=min(grace, LOST_LAUNCHER_GRACE)
                                              if gone else None)
                break
        self.ended.set()
        if not (timed_out or late or gone or stopped):
            # The launcher is gone; nothing of the run should be left on the head.
            leftovers, survivors = end_run(run_id, grace, spare_guardian=True)
            if leftovers:
                warnings.append(f"{len(leftovers)} process(es) of run {run_id} outlived the "
                                f"launcher on the head and were stopped")
        rc = report.exit_status(proc.returncode)
        # A node gone is the cause of the ranks elsewhere that failed after it. Asked at once (the
        # ranks fail faster than the heartbeat's next look) and recorded before anything waits on
        # that node: no clean-up or log is asked of it.
        if gone:  # named by the heartbeat, recorded already
            self.silent = dict(gone)
        else:
            self.silent = self.silent_nodes(unanswered) if rc != 0 and watching and not (
                timed_out or late or stopped) else {}
            if self.silent:
                self.save(lost_nodes=self.silent)
        result = {"rc": rc, "duration": round(time.monotonic() - started, 3), "timed_out": timed_out,
                  "warnings": warnings, "stdout_tail": report.output_tail(paths, plan.worker_files),
                  "rank0_tail": report.rank0_tail(plan.mode, paths)}
        # After a run that failed or was stopped, nothing of it may stay on any node. Open MPI
        # ends the ranks it started, but torchrun's workers, in process groups of their own, can
        # outlive a daemon that lost its mpirun. PALS nodes take no ssh (check_nodes false).
        ended = None
        if (rc != 0 or timed_out or late or gone or stopped) and plan.check_nodes and len(self.nodes) > 1:
            ended = end_run_on_nodes([node for node in self.nodes if node.name not in self.silent], plan.head,
                                     plan.ssh, plan.python, run_id, grace)
            ended["silent"] += [{"name": node.name, "address": node.address, "error": "no answer on the cluster network"}
                                for node in self.nodes if node.name in self.silent]
            result.update(stopped_on_nodes=ended["stopped"],
                          silent_nodes=[node["name"] for node in ended["silent"]])
        left = report.cleanup_message(ended, name_silent=not timed_out) if ended else ""
        if timed_out:
            # Which nodes still answer tells a node gone silent from a run that hung by itself.
            silent = ended["silent"] if ended else None
            state = "timed_out"
            msg = report.timeout_message(run_id, timeout, grace, silent, paths["run"]) + left
            if slurm_job and not proc.started:
                msg = (f"Slurm job {proc.job_id} of run {run_id} never started within launch_timeout "
                       f"({timeout} s): it stayed {waiting[0]} ({waiting[1]}), and was cancelled")
        elif late:
            state, result["never_started"] = "failed", late
            msg = (f"run {run_id} did not start within start_timeout ({plan.start_timeout} s): no process "
                   f"of it ran on {', '.join(late)} (a launcher waiting for a node whose daemon cannot call "
                   f"back: check the node's cluster interface and firewall, or raise start_timeout), and it "
                   f"was ended; logs under {paths['run']}{left}")
        elif gone:
            state = "failed"
            result.update(lost_nodes=gone, failed_host=next(iter(gone)))
            named = "; ".join(f"{name} stopped answering at {since}" for name, since in gone.items())
            msg = (f"{named} (no answer on the cluster network, or no command run there, for heartbeat_timeout, "
                   f"{plan.heartbeat_timeout} s: cut off, powered off, crashed or hung); run {run_id} was ended; "
                   f"logs under {paths['run']}{left}")
        elif stopped:
            state = "stopped"
            msg = (f"run {run_id} was stopped ({signal.Signals(stopped).name} to its "
                   f"supervisor: launch_action=stop, torchfleet stop or Ctrl-C); logs under {paths['run']}{left}")
        elif rc != 0:
            state = "failed"
            failure = report.describe_failure(
                read_end(paths["launcher"]), self.nodes, plan.mode, paths, plan.nproc,
                read_log=self.read_log)
            result.update(failure)
            msg = report.failure_message(run_id, rc, failure, paths) + left
            silent = self.silent  # said first
            if silent:
                result["lost_nodes"] = silent
                msg = "; ".join(f"{name} stopped answering at {since}" for name, since in silent.items()) + \
                    f"; then {msg}"
            if slurm_job and proc.info.get("JobState") not in ("COMPLETED", "FAILED"):
                msg = f"Slurm ended job {proc.job_id}: {proc.info.get('JobState')} " \
                      f"({proc.info.get('Reason')}); {msg}"
        else:
            state, msg = "succeeded", f"run {run_id} succeeded"
        if survivors:
            pids = [proc_["pid"] for proc_ in survivors]
            result["survivors"] = pids
            msg += (f"; processes {', '.join(map(str, pids))} of run {run_id} survived SIGKILL on "
                    f"the head; check them (uninterruptible I/O?)")
        return state, msg, result, restart_cause(state, result, late, survivors, plan.final_exit_codes)

    def fence(self, names: list) -> None:
        """In a thread, for an attempt: the nodes of the run it does not use (lost before), each
        ended of whatever of the run it still runs as soon as it answers again (a node back on
        the network with its stale ranks), which the launcher log says."""
        pending = [SimpleNamespace(**node) for node in self.plan.launch_plan["nodes"] if node["name"] in names]
        ended = self.ended
        while pending and not ended.wait(HEARTBEAT_EVERY):
            back = [node for node in pending if self.runs_true(node, 10)]
            if not back:
                continue
            done = end_run_on_nodes(back, self.plan.head, self.plan.ssh, self.plan.python, self.plan.run_id,
                                    self.plan.stop_grace)
            silent = {node["name"] for node in done["silent"]}
            for node in back:
                if node.name in silent:
                    continue
                pids = done["stopped"].get(node.name, [])
                with open(self.plan.paths["launcher"], "a", encoding="utf-8") as log:
                    log.write(f"torchfleet: {node.name} answers again at {now_iso()}; what it still ran of "
                              f"run {self.plan.run_id} was ended ({len(pids)} process(es))\n")
            pending = [node for node in pending if node not in back or node.name in silent]

    def nodes_for_restart(self):
        """The nodes of the next attempt: every node of the run that runs a command over ssh
        (in the run's order), once min_nodes do, with whatever is left of the run on them
        ended first (a node back with stale ranks among them). Past restart_wait, or on a stop, a
        sentence saying why there are none."""
        plan = self.plan
        every = [SimpleNamespace(**node) for node in plan.launch_plan["nodes"]]
        deadline = time.monotonic() + plan.restart_wait
        # The nodes just lost are asked first only when the others are too few: a hung node
        # would hold the round up for the ssh timeout. One that answers again is fenced meanwhile.
        others = [node for node in every if node.name not in self.silent]
        asked = others if len(others) >= plan.min_nodes else every
        while _Stop.signum is None:
            # Alive, not only answering the knock: a hung node's kernel answers it too. A node
            # that does not even answer on its ssh port is not waited for (ssh's own connect
            # timeout is longer).
            with ThreadPoolExecutor(max_workers=min(PROBE_FANOUT, len(asked))) as pool:
                ok = list(pool.map(lambda n: n.name == plan.head or (
                    node_answers(n.address, 22, timeout=2) and self.runs_true(n, 5)), asked))
            answering = [node for node, answers in zip(asked, ok) if answers]
            if len(answering) >= plan.min_nodes:
                end_run(plan.run_id, plan.stop_grace, spare_guardian=True)
                if plan.check_nodes and len(answering) > 1:
                    end_run_on_nodes(answering, plan.head, plan.ssh, plan.python, plan.run_id, plan.stop_grace)
                return [node.name for node in answering]
            if time.monotonic() >= deadline:
                missing = [node.name for node in every if node not in answering]
                return (f"{len(answering)} node(s) answered, fewer than min_nodes ({plan.min_nodes}), within "
                        f"restart_wait ({plan.restart_wait} s); missing: {', '.join(missing)}")
            asked = every
            time.sleep(HEARTBEAT_EVERY)
        return "stopped while waiting for the nodes of a restart"

    def next_attempt(self, attempt: int, names: list, cause: str) -> None:
        """Render the run's request again for attempt `attempt` on the nodes `names`: its own
        rendezvous port (nothing of an attempt before can join it), hostfile and worker log
        directory, and TORCHFLEET_RESTART_COUNT for the script."""
        renderer = _renderer()
        base = renderer.plan_from_dict(self.plan.launch_plan)
        workers = f"{base.node_log_dir}.{attempt}" if base.node_log_dir else None
        plan = dataclasses.replace(
            base, nodes=tuple(node for node in base.nodes if node.name in names), port=base.port + attempt,
            hostfile_path=f"{self.run_dir}/hostfile.{attempt}", node_log_dir=workers,
            env_set=MappingProxyType({**base.env_set, RESTART_VAR: str(attempt)}))
        rendered = renderer.render(plan)
        by_name = {node["name"]: node for node in self.plan.launch_plan["nodes"]}
        order = [by_name[name] for name in rendered.nodes]
        if self.plan.scheduler == "slurm":
            argv = self.next_job(attempt, plan, [name for name in by_name if name not in names])
            changes = {"argv": argv, "sbatch": argv, "command": shlex.join(argv)}
        else:
            with open(plan.hostfile_path, "w", encoding="utf-8") as handle:
                handle.write(rendered.hostfile)
            changes = {"argv": rendered.argv, "command": rendered.command}
        self.plan = dataclasses.replace(
            self.plan, world_size=rendered.world_size, nodes=order, paths={**self.plan.paths, "workers": workers or ""},
            **changes)
        self.nodes = [SimpleNamespace(**node) for node in order]
        self.launcher_env = rendered.env
        self.ended = threading.Event()
        self.heartbeat_ports = {}
        left_out = [node["name"] for node in self.plan.launch_plan["nodes"] if node["name"] not in names]
        if left_out and self.plan.check_nodes:
            threading.Thread(target=self.fence, args=(left_out,), daemon=True).start()
        said = (f"torchfleet: attempt {attempt} of run {self.plan.run_id} begins at {now_iso()} on "
                f"{', '.join(rendered.nodes)} (world size {rendered.world_size}); attempt {attempt - 1} "
                f"ended: {cause}\n")
        with open(self.plan.paths["launcher"], "a", encoding="utf-8") as log:
            log.write(said)
        self.save(nodes=list(rendered.nodes), slots=[node["slots"] for node in order],
                  world_size=rendered.world_size, command=self.plan.command, restarts=attempt,
                  msg=said.strip()[len("torchfleet: "):])

    def next_job(self, attempt: int, plan, left_out: list) -> list:
        """sbatch's argv for attempt `attempt` under Slurm: the run's request rendered for an
        allocation of `plan`'s nodes (its own rendezvous port and worker log directory), its script
        written as job.ATTEMPT.sbatch, without the Slurm nodes of those `left_out` (--exclude), its
        output added to the run's launcher log."""
        batch = _batch_writer()
        options = dict(self.plan.batch)
        slots = options.pop("slots")
        allocation = batch.for_allocation(plan, "slurm", len(plan.nodes), slots, run_id=self.plan.run_id)
        rendered = _renderer().render(allocation)
        path = os.path.join(self.run_dir, f"job.{attempt}.sbatch")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(batch.batch_script("slurm", allocation, rendered, nodes=len(plan.nodes),
                                            job_name=self.plan.run_id, fixed_run_id=True,
                                            writer=batch.MODULE_WRITER, **options))
        excluded = sorted(self.slurm_names[name] for name in left_out if name in self.slurm_names)
        first = [arg for arg in self.plan.sbatch[:-1] if not arg.startswith(("--exclude=", "--open-mode="))]
        return [*first, *([f"--exclude={','.join(excluded)}"] if excluded else []), "--open-mode=append", path]


def earlier_attempts(record: dict, plan: SupervisorPlan) -> list:
    """The attempts of a run restarted by hand, as its record lists them; a run that had no
    restarts allowed lists none, and its one attempt is made from the record itself."""
    if record.get("attempts"):
        return [dict(attempt) for attempt in record["attempts"]]
    return [{"attempt": 0, "started": record.get("started"), "ended": record.get("ended"),
             "nodes": record.get("nodes") or [node["name"] for node in plan.nodes],
             "world_size": record.get("world_size"),
             "cause": restart_cause("failed", record, record.get("never_started"), record.get("survivors"), [])
             if record.get("state") == "failed" else record.get("msg") or record.get("state"),
             "workers": plan.paths.get("workers") or None}]


def _renderer():
    """The launch's renderer: the run's copy beside this package (launch_plan.py), or the
    collection's own where the package is imported from the collection."""
    try:
        from . import launch_plan  # pylint: disable=import-outside-toplevel
    except ImportError:
        from .. import _launch_plan as launch_plan  # pylint: disable=import-outside-toplevel
    return launch_plan


def _batch_writer():
    """The batch script's writer: the run's copy beside this package (batch_script.py), or the
    collection's own (as _renderer)."""
    try:
        from . import batch_script  # pylint: disable=import-outside-toplevel
    except ImportError:
        from .. import _batch_script as batch_script  # pylint: disable=import-outside-toplevel
    return batch_script


def restart_cause(state: str, result: dict, late, survivors, final_exit_codes) -> str | None:
    """Why an attempt failed, where a restart can help: a node lost or cut off, a rank killed by
    a signal or exiting non-zero (but with one of `final_exit_codes`); None for any other end
    (success, a stop, a timeout, ranks that never started, processes that survive SIGKILL)."""
    if state != "failed" or late or survivors:
        return None
    if result.get("lost_nodes"):
        return "; ".join(f"{name} stopped answering at {since}" for name, since in result["lost_nodes"].items())
    code = result.get("failed_exit_code")
    if code is not None and code in final_exit_codes:
        return None
    if result.get("failed_rank") is not None:
        return f"rank {result['failed_rank']} on {result.get('failed_host')} exited with code {code}"
    return f"the launcher exited with code {result.get('rc')}"


def start(python: str, package_dir: str, run_dir: str, env: dict) -> subprocess.Popen:
    """Start the supervisor for the run in run_dir from the copy of this package in `package_dir`
    (`python -S -m PACKAGE.supervisor RUN_DIR` from its parent), in a session of its own so that
    no signal meant for its starter reaches it, its output in the run's supervisor.log."""
    parent, name = os.path.split(os.path.normpath(package_dir))
    # A new run's log is new; a run restarted by hand adds to its own.
    flags = os.O_APPEND if SupervisorPlan.read(run_dir).first_attempt else os.O_CREAT | os.O_EXCL
    log = os.open(os.path.join(run_dir, "supervisor.log"), os.O_WRONLY | flags, 0o640)
    try:
        return subprocess.Popen([python, "-S", "-m", f"{name}.supervisor", run_dir], env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=parent)
    finally:
        os.close(log)


def start_guardian(run_dir: str) -> int:
    """Start the run's guardian (`supervisor --guard RUN_DIR`): a small process of its own
    session that reads a pipe whose only writer is this supervisor. The pipe ends when the
    supervisor does, however it ends (SIGKILL, the OOM killer); a run it left running is then
    ended by the guardian on every node and recorded `lost`. It carries the supervisor's mark
    (a stop ends it with the supervisor; no watch counts it as a rank). Returns the pipe's write end, kept
    open (never inherited: Python's descriptors are not) for the supervisor's life."""
    read_end_, write_end = os.pipe()
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    log = os.open(os.path.join(run_dir, "supervisor.log"), os.O_WRONLY | os.O_APPEND)
    try:
        subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, "-S", "-m", f"{__package__}.supervisor", "--guard", run_dir],
            env=dict(os.environ), stdin=read_end_, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=package_parent)
    finally:
        os.close(read_end_)
        os.close(log)
    return write_end


def guard(run_dir: str) -> int:
    """The guardian: wait for the supervisor's end; if it left its run running, end the run
    here and on every node it can reach, as a stop would, and record it `lost`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while os.read(0, 4096):
        pass
    # As written, not as read_state says: the supervisor may not be reaped yet.
    try:
        with open(os.path.join(run_dir, STATE_FILE), encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return 0  # it never began
    if record.get("state") != "running":  # it ended as it should
        return 0
    died = now_iso()
    plan = SupervisorPlan.read(run_dir)
    grace = plan.stop_grace
    job = record.get("job_id")
    problems = []
    if plan.scheduler == "slurm":
        for job_id in [job] if job else [found["job_id"] for found in slurm.run_jobs({plan.run_id})]:
            try:
                slurm.cancel(job_id)
            except slurm.SlurmError as err:
                problems.append(str(err))
    stopped, survivors = end_run(plan.run_id, grace)
    ended = None
    nodes = [SimpleNamespace(**node) for node in plan.nodes]
    if plan.check_nodes and plan.ssh and len(nodes) > 1:
        ended = end_run_on_nodes(nodes, plan.head, plan.ssh, plan.python, plan.run_id, grace)
    if survivors:
        problems.append(f"processes {', '.join(str(p['pid']) for p in survivors)} survived SIGKILL on the head")
    msg = (f"the supervisor of run {plan.run_id} died at {died} (killed, or out of memory): its "
           f"guardian ended the run ({len(stopped)} process(es) on the head"
           + (f", {sum(len(p) for p in ended['stopped'].values())} on the other nodes" if ended else "")
           + ")" + (report.cleanup_message(ended) if ended else "")
           + ("; " + "; ".join(problems) if problems else "")
           + f"; logs under {run_dir}")
    raw = RunRecord.from_dict(record).updated(
        state="lost", ended=died, msg=msg, stopped_on_nodes=ended["stopped"] if ended else None,
        silent_nodes=[node["name"] for node in ended["silent"]] if ended else None,
        survivors=[proc["pid"] for proc in survivors] or None)
    release_space(run_dir)
    write_state(run_dir, raw.to_dict())
    if plan.control_dir:
        close_ssh_masters(plan.ssh, plan.control_dir, [n.address for n in nodes if n.name != plan.head])
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--guard"]:
        return guard(argv[1])
    run_dir = argv[0]
    # `python -m` runs it from the package's parent directory (on sys.path, as an absolute path);
    # the run's directory is the launcher's working directory where the plan names none.
    os.chdir(run_dir)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _Stop.handler)
    # A terminal closing, or the connection that started the module going, is not a stop.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    run = Run(run_dir)
    guardian_pipe = start_guardian(run_dir)  # noqa: F841 - held open for the supervisor's life
    try:
        record = run.supervise()
    except Exception as err:  # noqa: BLE001 - recorded, so the run never reads as running
        run.save(final=True, state="failed", ended=now_iso(),
                 msg=f"the supervisor of run {run.plan.run_id} failed: {type(err).__name__}: {err}; "
                     f"see supervisor.log in {run_dir}, and end what is left with {report.STOP_HINT}")
        raise
    return 0 if record.state == "succeeded" else 1


if __name__ == "__main__":
    # Run as its own program on the head, not inside a module: an exit status, not exit_json.
    raise SystemExit(main(sys.argv[1:]))
