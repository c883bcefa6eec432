"""A run's processes on this node: found by the run id in their environment (or, for an Open MPI
daemon, in its command line), and ended, process group by process group. Standard library only:
the probe carries it to the nodes."""

from __future__ import annotations

import os
import re
import shlex
import signal
import time


RUN_ID_VAR = "TORCHFLEET_RUN_ID"


# Set (to the run id) in the environment of a run's supervisor on the head, beside RUN_ID_VAR.
SUPERVISOR_VAR = "TORCHFLEET_SUPERVISOR"


def unmarked_env() -> dict:
    """This process's environment without a run's marks: for what it starts that is not the run
    (an ssh and the master it may leave behind), so that only the run's own processes carry them."""
    return {name: value for name, value in os.environ.items() if name not in (RUN_ID_VAR, SUPERVISOR_VAR)}


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def env_value(environ_bytes: bytes, name: str = RUN_ID_VAR) -> str | None:
    """A variable (TORCHFLEET_RUN_ID by default) from the raw bytes of /proc/PID/environ."""
    prefix = name.encode() + b"="
    for item in environ_bytes.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("utf-8", "replace")
    return None


def cmdline(pid, limit: int) -> str:
    argv = read_bytes(f"/proc/{pid}/cmdline").rstrip(b"\0").split(b"\0")
    text = shlex.join(arg.decode("utf-8", "replace") for arg in argv)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _ancestors() -> set[int]:
    """This process and its ancestors: never stop the module (or whoever started it)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = int(read_bytes(f"/proc/{pid}/stat").rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


# Open MPI's daemon carries no TORCHFLEET_RUN_ID, but its command line names the run's per-rank
# log directory (RUNS/RUN_ID/ranks): a daemon whose mpirun died before telling it to go is found
# by that, and ended with the rest of its run.
_DAEMON_RUN = re.compile(rb"orte_output_filename\x00[^\x00]*/([A-Za-z0-9_.-]{1,64})/ranks\x00")


def daemon_run_id(cmdline_bytes: bytes) -> str | None:
    """The run of an Open MPI daemon (orted), from its command line; None for anything else."""
    argv0 = cmdline_bytes.split(b"\x00", 1)[0]
    if not argv0.endswith(b"orted"):
        return None
    found = _DAEMON_RUN.search(cmdline_bytes)
    return found.group(1).decode() if found else None


def find_run_processes(run_ids=None) -> list[dict]:
    """Processes on this node carrying TORCHFLEET_RUN_ID (only those in `run_ids` if given):
    this user's, or everyone's as root, in this PID namespace. Zombies have an empty environ,
    so a process that is dead but not yet reaped does not count."""
    skip = _ancestors()
    uid = os.geteuid()
    try:
        own_ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        own_ns = None
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        base = f"/proc/{entry}"
        try:
            if uid != 0 and os.stat(base).st_uid != uid:
                continue
            # A container's processes are another node's business.
            if own_ns is not None and os.readlink(f"{base}/ns/pid") != own_ns:
                continue
            environ = read_bytes(f"{base}/environ")
            run_id = env_value(environ) or daemon_run_id(read_bytes(f"{base}/cmdline"))
            if run_id is None or (run_ids is not None and run_id not in run_ids):
                continue
            line = cmdline(entry, 300)
            pgid = os.getpgid(int(entry))
        except OSError:
            continue  # gone meanwhile, or not ours to read
        found.append({"pid": int(entry), "run_id": run_id, "cmdline": line, "pgid": pgid,
                      "supervisor": env_value(environ, SUPERVISOR_VAR) is not None})
    return sorted(found, key=lambda proc: proc["pid"])


def _signal(procs, signum) -> None:
    """Signal the process groups of `procs`; a process in our own group (or an odd one) alone."""
    own = os.getpgrp()
    groups = {proc["pgid"] for proc in procs if proc["pgid"] > 1 and proc["pgid"] != own}
    targets = [(os.killpg, pgid) for pgid in sorted(groups)]
    targets += [(os.kill, proc["pid"]) for proc in procs if proc["pgid"] not in groups]
    for send, target in targets:
        try:
            send(target, signum)
        except OSError:
            pass  # already gone


def _wait_gone(run_ids, seconds: float, spare_supervisor: bool = False) -> list[dict]:
    deadline = time.monotonic() + seconds
    while True:
        alive = [proc for proc in find_run_processes(run_ids) if not (spare_supervisor and proc["supervisor"])]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.2)


def stop_processes(procs, grace: float, spare_supervisor: bool = False) -> list[dict]:
    """TERM the runs' process groups, give them `grace` seconds, KILL what is left; return what
    survived even that. Each round rescans by run id: Open MPI and torchrun put every rank and
    worker in a process group of its own, so groups alone do not reach all of a run. With
    `spare_supervisor`, the processes with the supervisor's mark (its guardian) are left alone
    in every round, not only the first."""
    run_ids = {proc["run_id"] for proc in procs}
    _signal(procs, signal.SIGTERM)
    alive = _wait_gone(run_ids, grace, spare_supervisor)
    if alive:
        _signal(alive, signal.SIGKILL)
        alive = _wait_gone(run_ids, 10, spare_supervisor)  # SIGKILL is not refused, but teardown takes a moment
    return alive


def end_run(run_id: str, grace: float, spare_guardian: bool = False) -> tuple[list[dict], list[dict]]:
    """End what is left of one run on this node: (what was found and stopped, what survived).
    `spare_guardian`: the supervisor's own call; its guardian (the one other process with the
    supervisor's mark) must outlive it, or a supervisor killed later would leave its run alone."""
    procs = [proc for proc in find_run_processes({run_id})
             if not (spare_guardian and proc["supervisor"])]
    return procs, stop_processes(procs, grace, spare_guardian) if procs else []
