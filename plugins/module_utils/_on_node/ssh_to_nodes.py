"""The head's ssh to the other nodes, in parallel: the probe's questions (probe_nodes), the end
of a run's leftovers after it failed or was stopped (end_run_on_nodes), and the OpenSSH masters a
launch keeps open to them (close_ssh_masters). Used by the launch module for its checks and by
the run's supervisor for its clean-up, and its `program` by the torchfleet command for the
follower it sends to the head; standard library only.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

from . import source
from .loader import program_of
from .probe import probe
from .processes import unmarked_env

# The head's checks of the other nodes: seconds for one node to answer, and how many at once
# (each ssh holds three pipes; 64 stays far from a 1024 file limit).
PROBE_TIMEOUT = 20
PROBE_FANOUT = 64
# The probe's files, each before those importing it, as one `python3 -S -c` program.
PROBE_PROGRAM = ("board", "stacks", "processes", "node_files", "log_ends", "packages", "interfaces", "probe")
# Seconds an ssh master outlives its last session: it ends by itself if nobody closes it.
MASTER_PERSIST = 60


def program(names: tuple, main: str) -> str:
    """The text of a program made of the package's files `names` (each before those importing
    it) that runs `main`'s main()."""
    return program_of([(name, source(name)) for name in names], main)


def probe_command(python: str) -> str:
    # ssh hands the remote side one command line, quoted here; the request travels on stdin.
    # -S: the probe needs the standard library alone, not the environment's site-packages.
    return shlex.join([python, "-S", "-c", program(PROBE_PROGRAM, "probe")])


def probe_nodes(nodes, head: str, ssh: str | None, python: str, requests: dict,
                timeout: int = PROBE_TIMEOUT, connect_timeout: int | None = None,
                control_dir: str | None = None) -> dict:
    """The probe's answer to each node's request, {name: answer}: here for the head, over the
    cluster's ssh for the others, as the training account, the way mpirun reaches them. A node
    that does not answer within `timeout` seconds (or connect within `connect_timeout`, half of
    it by default) gets {"error": ...}. In parallel, at most PROBE_FANOUT at once: the slowest
    node bounds the wait. With `control_dir`, each connection stays open as an OpenSSH master
    there (see _launch_start.ssh_masters), for the next probe and for mpirun."""
    connect_timeout = connect_timeout or max(1, timeout // 2)
    sharing = ["-o", "ControlMaster=auto", "-o", f"ControlPath={control_dir}/%C",
               "-o", f"ControlPersist={MASTER_PERSIST}"] if control_dir else []
    remote = probe_command(python) if any(node.name != head for node in nodes) else None

    def ask(node):
        if node.name == head:
            try:
                return probe(requests[node.name])
            except OSError as err:
                return {"error": str(err)}
        argv = [ssh, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout}", *sharing,
                node.address, remote]
        try:
            # Unmarked: a master this ssh leaves (ControlPersist) is not one of the run's processes.
            done = subprocess.run(argv, input=json.dumps(requests[node.name]), env=unmarked_env(),
                                  capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"error": f"no answer within {timeout} s"}
        try:
            return json.loads(done.stdout)
        except ValueError:
            lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
            said: dict[str, object] = {"error": lines[-1] if lines else f"ssh exited {done.returncode}"}
            if done.returncode != 255:  # ssh's own failures are 255: this one reached the node
                said["failed_there"] = True
            return said
    if not nodes:
        return {}
    with ThreadPoolExecutor(max_workers=min(PROBE_FANOUT, len(nodes))) as pool:
        return dict(zip((node.name for node in nodes), pool.map(ask, nodes)))


def nodes_without_ranks(nodes, head: str, ssh: str | None, python: str, run_id: str, launchers,
                        control_dir: str | None = None, timeout: int = PROBE_TIMEOUT) -> list[str]:
    """The nodes where no process of `run_id` (torchrun, or a rank) runs yet: the supervisor and
    the launcher (`launchers`, pids on the head) do not count; a node that does not answer is
    named too."""
    answers = probe_nodes(nodes, head, ssh, python, {node.name: {"expect": {}} for node in nodes},
                          timeout=timeout, control_dir=control_dir)
    return [name for name, answer in answers.items()
            if "error" in answer or not any(proc["run_id"] == run_id and proc["pid"] not in launchers
                                            and not proc["supervisor"] for proc in answer["runs"])]


def end_run_on_nodes(nodes, head: str, ssh: str | None, python: str, run_id: str, grace: int,
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
    ended: dict = {"stopped": {}, "survivors": {}, "silent": []}
    for node in others:
        answer = answers[node.name]
        if "error" in answer:
            ended["silent"].append({"name": node.name, "address": node.address, "error": answer["error"]})
            continue
        for key in ("stopped", "survivors"):
            if answer[key]:
                ended[key][node.name] = [proc["pid"] for proc in answer[key]]
    return ended


def take_stacks(nodes, head: str, ssh: str | None, python: str, run_id: str, run_dir: str, attempt: int,
                control_dir: str | None = None) -> dict:
    """{rank: its Python stacks and flight recorder} of the attempt's ranks on every node that
    answers (stacks.take)."""
    if ssh is None:
        nodes = [node for node in nodes if node.name == head]
    request = {"stacks": {"run_id": run_id, "run_dir": run_dir, "attempt": attempt}}
    answers = probe_nodes(nodes, head, ssh, python, {node.name: request for node in nodes},
                          timeout=PROBE_TIMEOUT, connect_timeout=5, control_dir=control_dir) if nodes else {}
    return {int(rank): took for answer in answers.values() for rank, took in (answer.get("stacks") or {}).items()
            if isinstance(took, dict)}


def withdraw_from_board(nodes, head: str, ssh: str | None, python: str, run_id: str,
                        control_dir: str | None = None) -> None:
    """Take the run's entries off the run board of `nodes` (the run ended, or never started), so
    that another account's launch may have them at once rather than after board.STARTING_FOR."""
    if ssh is None:  # the head alone takes no ssh
        nodes = [node for node in nodes if node.name == head]
    if nodes:
        probe_nodes(nodes, head, ssh, python, {node.name: {"withdraw": run_id} for node in nodes},
                    timeout=10, connect_timeout=5, control_dir=control_dir)


def close_ssh_masters(ssh: str | None, control_dir: str, addresses) -> None:
    """End the masters in `control_dir` (a run's sessions are over by now) and remove it."""
    if ssh and addresses and os.path.isdir(control_dir) and os.listdir(control_dir):
        def close(address):
            try:
                subprocess.run([ssh, "-o", f"ControlPath={control_dir}/%C", "-O", "exit", address],
                               capture_output=True, timeout=10, check=False, env=unmarked_env())
            except subprocess.TimeoutExpired:
                pass  # it ends by itself MASTER_PERSIST seconds after its last session
        with ThreadPoolExecutor(max_workers=min(PROBE_FANOUT, len(addresses))) as pool:
            list(pool.map(close, addresses))
    shutil.rmtree(control_dir, ignore_errors=True)
