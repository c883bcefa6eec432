"""What a run's logs say: its exit status, the first rank that failed and where, and the words a
user reads about it.

Used by the launch module and by the run's supervisor on the head (outside Ansible), so it imports
only the standard library and its package.
"""

from __future__ import annotations

import glob
import os
import re
import signal
from datetime import datetime, timezone

from .labels import slot_owner, untagged
from .launchers import launcher_named
from .log_ends import clipped, last_lines, log_tail, read_end
from .record import node_workers

STOP_HINT = "ansible-playbook launch.yml -e launch_action=stop (or: torchfleet stop --all)"
TAIL_LINES = 20


def now_iso(at: float | None = None) -> str:
    """The head's clock, UTC, ISO 8601, of now or of the time.time() `at`."""
    when = datetime.now(timezone.utc) if at is None else datetime.fromtimestamp(at, timezone.utc)
    return when.isoformat(timespec="seconds")


def exit_status(returncode: int) -> int:
    """Shell convention: Popen's -N (killed by signal N) becomes 128+N, so it is never 0."""
    return 128 - returncode if returncode < 0 else returncode


def signal_name(status: int) -> str | None:
    if status <= 128:
        return None
    try:
        return signal.Signals(status - 128).name
    except ValueError:
        return None


# torchrun's summary, one per node whose workers failed:
#   Root Cause (first observed failure):
#   [0]:
#     time      : 2026-11-21_06:37:49
#     host      : gpu02
#     rank      : 5 (local_rank: 1)
#     exitcode  : -9 (pid: 7689)  (SIGKILL)
_ROOT_CAUSE = "Root Cause (first observed failure):"
_SUMMARY_FIELD = re.compile(r"\b(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
_SUMMARY_RANK = re.compile(r"(\d+)\s*\(local_rank:\s*(\d+)\)")
_SUMMARY_EXIT = re.compile(r"(-?\d+)")


# torchrun's own line as it notices a worker's end, before it stops the others and sums up:
#   ... failed (exitcode: 3) local_rank: 1 (pid: 7704) of binary: ...
_NOTICED = re.compile(r"failed \(exitcode: -?\d+\) local_rank: \d+")
# The launcher's tag before each line of one node's torchrun: Open MPI's, else Hydra's.
_SOURCE_TAG = re.compile(r"^(\[\d+,\d+\]<(?:stdout|stderr|stddiag)>: ?|\[\d+\] )")


def _by_source(text: str) -> dict:
    """{tag: [(position in the log, line without the tag)]}: each node's torchrun apart (the
    launcher interleaves their lines as they come), the untagged lines under ''."""
    sources: dict = {}
    for position, line in enumerate(text.splitlines()):
        tag = _SOURCE_TAG.match(line)
        key = tag.group(1).strip() if tag else ""
        sources.setdefault(key, []).append((position, line[tag.end():] if tag else line))
    return sources


def launcher_own(text: str) -> str:
    """The launcher's own lines of its log: none of those it tags as a process's output, so that a
    rank printing Open MPI's (or Hydra's) words is never taken for the launcher's."""
    return "".join(line for line in text.splitlines(keepends=True) if not _SOURCE_TAG.match(line))


def parse_torchrun_failures(text: str) -> list[dict]:
    """Every root cause block in a launcher log, each read from its own node's lines, in the order
    they appear; each with `noticed`: where in the log its node's torchrun first said it saw a
    worker fail (the order in which the head learned of the failures)."""
    failures = []
    for lines in _by_source(text).values():
        noticed = next((position for position, line in lines if _NOTICED.search(line)), None)
        for i, (position, line) in enumerate(lines):
            if _ROOT_CAUSE not in line:
                continue
            fields: dict[str, str] = {}
            for _position, follow in lines[i + 1:i + 10]:
                match = _SUMMARY_FIELD.search(follow)
                if match:
                    fields.setdefault(match.group(1), match.group(2).strip())
                if "traceback" in fields:
                    break
            rank = _SUMMARY_RANK.match(fields.get("rank", ""))
            code = _SUMMARY_EXIT.match(fields.get("exitcode", ""))
            if rank and code:
                failures.append({"time": fields.get("time", ""), "host": fields.get("host") or None,
                                 "rank": int(rank.group(1)), "local_rank": int(rank.group(2)),
                                 "exit_code": exit_status(int(code.group(1))),
                                 "noticed": position if noticed is None else min(noticed, position),
                                 "position": position})
    return sorted(failures, key=lambda failure: failure["position"])


def first_torchrun_failure(text: str) -> dict | None:
    """With several nodes failing, the root cause is the one the head learned of first: the
    first node whose torchrun said it saw a worker fail, in the launcher log's order (the
    launcher writes each node's lines as they reach it). Never by the times torchrun prints:
    those are each node's own clock, and clocks drift."""
    failures = parse_torchrun_failures(text)
    if not failures:
        return None
    return min(failures, key=lambda failure: (failure["noticed"], failure["position"]))


# Open MPI 4.x, a rank that exits non-zero:
#   Process name: [[28791,1],1]
#   Exit code:    3
# and one killed by a signal:
#   mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).
_MPI_EXIT = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(\d+)")
_MPI_SIGNAL = re.compile(r"process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)")


def parse_mpirun_failure(text: str) -> dict | None:
    """The first failed process Open MPI names: its MPI rank, host (when printed) and status."""
    found: list[tuple[int, dict]] = []
    match = _MPI_EXIT.search(text)
    if match:
        found.append((match.start(), {"rank": int(match.group(1)), "host": None,
                                      "exit_code": int(match.group(2))}))
    match = _MPI_SIGNAL.search(text)
    if match:
        found.append((match.start(), {"rank": int(match.group(1)), "host": match.group(2),
                                      "exit_code": 128 + int(match.group(3))}))
    return min(found, key=lambda item: item[0])[1] if found else None


# Open MPI 4.x, when mpirun loses a node's daemon (orted): the node went down or off the network,
# or the daemon died. No rank is named; the node is, as the hostfile gave it:
#   ORTE has lost communication with a remote daemon.
#
#     HNP daemon   : [[16969,0],0] on node node0
#     Remote daemon: [[16969,0],2] on node 172.19.0.4
_MPI_LOST_DAEMON = re.compile(r"ORTE has lost communication with a remote daemon\.\s*\n"
                              r"(?:.*\n){0,3}?\s*Remote daemon\s*:\s*\S+ on node (\S+)")


def parse_lost_daemon(text: str) -> str | None:
    """The node (address or name, as in the hostfile) whose daemon mpirun lost first."""
    match = _MPI_LOST_DAEMON.search(text)
    return match.group(1) if match else None


def node_named(host: str, order) -> str:
    """The inventory name of a node Open MPI names by its hostfile address; else `host`."""
    return next((node.name for node in order if host in (node.address, node.name)), host)


def rank_node(rank: int, order, mode: str) -> str | None:
    """The node an MPI rank ran on: ranks fill the hostfile's slots in order (--map-by slot);
    with one process per node the MPI rank is the node's index."""
    if mode != "rank":
        return order[rank].name if 0 <= rank < len(order) else None
    index = slot_owner(rank, [node.slots for node in order])
    return order[index].name if index is not None else None


def tail(text: str, lines: int = TAIL_LINES) -> list[str]:
    return clipped(text.splitlines()[-lines:])


def group_runs(procs) -> list[dict]:
    runs: dict[str, list[int]] = {}
    for proc in procs:
        runs.setdefault(proc["run_id"], []).append(proc["pid"])
    return [{"run_id": run_id, "pids": pids} for run_id, pids in sorted(runs.items())]


def runs_listed(runs) -> str:
    """Runs alive on nodes ([{node, run_id, pids}]) as a refusal names them."""
    return "; ".join(f"on {run['node']}: {run['run_id']} (pids {', '.join(map(str, run['pids']))})" for run in runs)


def cleanup_message(ended, name_silent: bool = True) -> str:
    """What the clean-up on the other nodes could not do, for the end of a failure message (a
    timeout's message names the silent nodes itself)."""
    said = ""
    if ended["survivors"]:
        said += "; processes survived SIGKILL on " + "; ".join(
            f"{name}: {', '.join(map(str, pids))}" for name, pids in ended["survivors"].items())
        said += " (uninterruptible I/O?): check them"
    if ended["silent"] and name_silent:
        said += ("; could not reach " + ", ".join(node["name"] for node in ended["silent"])
                 + f" to end what is left of the run there: once it is back, end it with {STOP_HINT}")
    return said


def timeout_message(run_id, timeout, grace, silent, run_dir) -> str:
    what = (f"run {run_id} outlived launch_timeout={timeout}s and was stopped (SIGTERM, SIGKILL "
            f"after {grace}s)")
    if silent:
        named = "; ".join(f"{node['name']} ({node['address']}): {node['error']}"
                          for node in silent)
        what += (f"; these nodes went silent, they do not answer ssh from the head: {named}. "
                 f"A node cut off keeps the other ranks waiting; what ran there may still run: "
                 f"once it is back, end it with {STOP_HINT}")
    elif silent is not None:
        what += "; every node answers ssh from the head, so the run itself was slow or hung"
    return f"{what}; logs under {run_dir}"


def read_tail(path: str, lines: int = TAIL_LINES) -> list[str]:
    return untagged(tail(read_end(path, 256 * 1024), lines))


def output_tail(paths, worker_files: bool) -> list[str]:
    """The last lines of the run's output as the head holds it: the launcher's, or where the
    ranks write only to their own files, those of the head's workers (each one's last lines, in
    local rank order)."""
    if not worker_files:
        return read_tail(paths["launcher"])
    found = []
    for path in sorted(glob.glob(os.path.join(node_workers(paths["workers"], 0), "*", "attempt_*", "*", "stdout.log")),
                       key=lambda path: int(os.path.basename(os.path.dirname(path)))):
        found += clipped(last_lines(read_end(path, 256 * 1024), TAIL_LINES))
    return found[-TAIL_LINES:]


def rank0_tail(mode: str, paths) -> list[str]:
    # Global rank 0 runs on the head: torchrun's worker 0 there, or Open MPI's rank 0.
    if mode == "rank":
        pattern = os.path.join(paths["ranks"], "*", "rank.0", "stdout")
    else:
        pattern = os.path.join(node_workers(paths["workers"], 0), "*", "attempt_*", "0", "stdout.log")
    return untagged(log_tail(pattern, TAIL_LINES)["lines"])


def head_log(order):
    """A `read_log` that reads the head's own files and nothing of the other nodes."""
    def read(host, pattern):
        found = log_tail(pattern, TAIL_LINES) if host == order[0].name else {}
        return found.get("path"), found.get("lines", [])
    return read


def describe_failure(text, order, mode, paths, nproc=None, read_log=None, mpich_launcher=None) -> dict:
    """failed_* result keys from the launcher log; None where the log does not tell. The failing
    rank's own log is read on the node it ran on: `read_log(node name, glob pattern)` gives
    (the resolved path or None, its last lines); the head's alone by default."""
    read_log = read_log or head_log(order)
    failure = first_torchrun_failure(text) if mode != "rank" else None
    if failure:
        host = order[0].name if len(order) == 1 else failure["host"]
        # Every node runs nproc workers, node ranks in hostfile order: the inventory name follows
        # from the global rank, where torchrun only knows the host's own name for itself.
        index = next((i for i, node in enumerate(order) if node.name == host), 0)
        if nproc and failure["rank"] is not None and 0 <= failure["rank"] // nproc < len(order):
            index = failure["rank"] // nproc
            host = order[index].name
        pattern = f"{node_workers(paths['workers'], index)}/*/attempt_*/{failure['local_rank']}/stderr.log"
    else:
        own = launcher_own(text)  # only Open MPI (or Hydra) speaks for itself
        hydra = launcher_named(mode, mpich_launcher).failure(own)
        if hydra:
            # Hydra names the node, not the rank: its torchrun ended without a worker's summary.
            return {"failed_rank": None, "failed_host": node_named(hydra["host"], order),
                    "failed_exit_code": hydra["exit_code"], "failed_log": paths["launcher"],
                    "failed_log_tail": untagged(tail(text))}
        failure = parse_mpirun_failure(own)
        if not failure:
            # No process failed as far as Open MPI knows, but a whole node may be gone: that node
            # is failed_host, with no rank and no exit code.
            lost = parse_lost_daemon(own)
            return {"failed_rank": None, "failed_host": node_named(lost, order) if lost else None,
                    "failed_exit_code": None, "failed_log": paths["launcher"],
                    "failed_log_tail": untagged(tail(text))}
        host = rank_node(failure["rank"], order, mode) or failure["host"]
        if mode != "rank":
            # A per-node launcher (torchrun) failed without a worker failure summary: report
            # the node; there is no worker rank to name.
            return {"failed_rank": None, "failed_host": host, "failed_exit_code": failure["exit_code"],
                    "failed_log": paths["launcher"], "failed_log_tail": untagged(tail(text))}
        pattern = f"{paths['ranks']}/*/rank.{failure['rank']}/stderr"
    found, lines = read_log(host, pattern)
    head, stream, rest = pattern.rpartition("stderr")
    if not lines and head:  # nothing on stderr (an exit without a traceback): its stdout says more
        found_out, lines = read_log(host, head + "stdout" + rest)
        found = found_out if lines else found
    lines = untagged(lines)
    return {"failed_rank": failure["rank"], "failed_host": host,
            "failed_exit_code": failure["exit_code"],
            "failed_log": found or pattern, "failed_log_tail": lines or untagged(tail(text))}


def failure_message(run_id, rc, failure, paths) -> str:
    code = failure["failed_exit_code"]
    if code is None and failure["failed_host"]:
        what = (f"Open MPI lost contact with its daemon on {failure['failed_host']}: that node "
                f"went down or off the network, or the daemon died there; the ranks elsewhere "
                f"were stopped")
    elif code is None:
        what = (f"the launcher exited with rc {rc} without naming a failed rank: the run was "
                f"stopped from outside (state=stopped), or the launcher could not start it (a "
                f"node unreachable, a wrong path or option: see the launcher log)")
    else:
        name = signal_name(code)
        how = f"was killed by {name} (exit code {code})" if name else f"exited with code {code}"
        who = (f"rank {failure['failed_rank']}" if failure["failed_rank"] is not None
               else "the launcher")
        what = f"{who} on {failure['failed_host'] or 'an unknown host'} {how} first"
        if failure["failed_log"] != paths["launcher"]:
            what += f"; its log: {failure['failed_log']} on {failure['failed_host']}"
    return (f"run {run_id} failed (launcher rc {rc}): {what}; launcher log: {paths['launcher']}; "
            f"all logs of the run under {paths['run']} (failed_log_tail has the last lines)")


def nodes_ended_message(causes: list[str], run_id: str, run_dir: str, left: str) -> str:
    """An attempt ended for nodes dead or lost (`causes`, each naming its node)."""
    return f"{'; '.join(causes)}; run {run_id} was ended; logs under {run_dir}{left}"


def never_started_message(run_id: str, start_timeout: int, late, run_dir: str, left: str) -> str:
    return (f"run {run_id} did not start within start_timeout ({start_timeout} s): no process "
            f"of it ran on {', '.join(late)} (a launcher waiting for a node whose daemon cannot call "
            f"back: check the node's cluster interface and firewall, or raise start_timeout), and it "
            f"was ended; logs under {run_dir}{left}")


HUNG_RC = 123  # `wait`'s exit code for a run that ended hung
TIMED_OUT_RC = 124  # and for one ended at launch_timeout, as timeout(1) says it


def hung_message(run_id: str, since: str, allowed: float, named: str, run_dir: str, left: str) -> str:
    """An attempt ended because no rank made progress for `allowed` s while every node was alive."""
    return (f"run {run_id} hung: no rank made progress since {since} (hang_timeout {allowed:.0f} s) while "
            f"every node was alive; stopped first: {named}; logs under {run_dir}{left}")


def stopped_message(run_id: str, signum: int, run_dir: str, left: str) -> str:
    return (f"run {run_id} was stopped ({signal.Signals(signum).name} to its "
            f"supervisor: launch_action=stop, torchfleet stop or Ctrl-C); logs under {run_dir}{left}")


def supervisor_failed_message(run_id: str, err: BaseException, ended: str, run_dir: str) -> str:
    return (f"the supervisor of run {run_id} failed: {type(err).__name__}: {err}; {ended}; "
            f"see supervisor.log in {run_dir}")


def guardian_message(run_id: str, died: str, done: dict, run_dir: str) -> str:
    """What the guardian of a supervisor that died did (guardian.end_everywhere's `done`)."""
    ended = done["ended"]
    return (f"the supervisor of run {run_id} died at {died} (killed, out of memory, or failed): its "
            f"guardian ended the run ({len(done['stopped'])} process(es) on the head"
            + (f", {sum(len(p) for p in ended['stopped'].values())} on the other nodes" if ended else "")
            + ")" + (cleanup_message(ended) if ended else "")
            + ("; " + "; ".join(done["problems"]) if done["problems"] else "")
            + f"; logs under {run_dir}")
