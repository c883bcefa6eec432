"""A run's record on the head, the supervisor's plan, and the run's output as it is written.

Each run has a directory on the head (`log_dir/RUN_ID`). Its supervisor keeps `state.json`
there (a RunRecord): run id, command, nodes, world size, started, state, rc, duration, the
failure's details. It is replaced whole (write, then rename), so a reader never sees half a
record. A record that says `running` while its supervisor is gone (killed, OOM, the head
rebooted) reads as `lost`. Beside it, `run.json` (a SupervisorPlan) is what the launch module
told the supervisor to run.

The launch module, the supervisor, torchrun_run_info and the torchfleet command import this
file; the torchfleet command also runs it on the head over ssh (`python3 -S -c <this file> follow
RUN_DIR`) to stream a run's output and to wait for its end. So it imports only the standard
library, and nothing of its package.
"""

from __future__ import annotations

import collections
import enum
import glob
import json
import os
import pwd
import queue
import re
import select
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, fields, replace

STATE_FILE = "state.json"
PLAN_FILE = "run.json"
LAUNCHER_LOG = "launcher.log"


class RunState(str, enum.Enum):
    """A run's states, as its record says them. Each change is a transition (transitions.py)."""
    STARTING = "starting"  # its supervisor holds it; the launcher is not started yet
    RUNNING = "running"  # an attempt's launcher runs (or its Slurm job is submitted)
    RESTARTING = "restarting"  # between two attempts: the nodes fenced, waited for
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    TIMED_OUT = "timed_out"
    LOST = "lost"  # its supervisor died: its guardian ended it, or nobody recorded how it ended


ACTIVE = (RunState.STARTING.value, RunState.RUNNING.value, RunState.RESTARTING.value)
ENDED = (RunState.SUCCEEDED.value, RunState.FAILED.value, RunState.STOPPED.value, RunState.TIMED_OUT.value)
# The follower's lines on stdout: "L <output line>" while the run goes on, "KIND KEY <text>" for
# the pieces of a line redrawn or cut (kinds P, R, C, D: see Tail.pieces; KEY names the file, one
# word), "S <status>" when a scheduler's job changes state (pending and why, running), "E <record>"
# once.
LINE, STATUS, END = "L ", "S ", "E "
PIECES = ("P ", "R ", "C ", "D ")
POLL = 0.05  # seconds between looks at a quiet log: a written line is shown within about this
CHUNK = 1 << 20  # bytes of the log read at a time


# Where a key of the record is shown besides state.json and torchrun_run_info: in the launch
# module's result (RESULT), in `torchfleet runs --json` (LISTED), in the --json end report of
# `torchfleet launch`, `wait` and `logs -f` (REPORTED).
RESULT, LISTED, REPORTED = "result", "listed", "reported"


def _shown(*views, optional=False) -> dict:
    """A key's metadata: the views it is shown in, and whether it is left out of state.json
    while unset (None)."""
    return {"shown": views, "optional": optional}


def _known(cls, data: dict) -> dict:
    """The items of `data` that are fields of the dataclass `cls` (a newer version's extra keys
    are left out; missing ones take their defaults)."""
    names = {key.name for key in fields(cls)}
    return {key: value for key, value in data.items() if key in names}


@dataclass
class RunRecord:
    """A run's record (state.json): written by its supervisor, read by the launch module,
    torchrun_run_info and the torchfleet command. Its keys are these fields; the optional ones
    appear once the run has them (a Slurm job's state, the end's tails and clean-up)."""
    run_id: str | None = field(default=None, metadata=_shown(LISTED, REPORTED))
    state: str = field(default="starting", metadata=_shown(RESULT, LISTED, REPORTED))  # a RunState
    rc: int | None = field(default=None, metadata=_shown(RESULT, LISTED, REPORTED))
    started: str | None = field(default=None, metadata=_shown(RESULT, LISTED, REPORTED))
    ended: str | None = field(default=None, metadata=_shown(RESULT, LISTED))
    duration: float | None = field(default=None, metadata=_shown(RESULT, LISTED, REPORTED))
    world_size: int | None = field(default=None, metadata=_shown(LISTED, REPORTED))
    nodes: list = field(default_factory=list, metadata=_shown(LISTED))  # names, in rank order
    command: str | None = field(default=None, metadata=_shown(REPORTED))
    failed_rank: int | None = field(default=None, metadata=_shown(RESULT, LISTED, REPORTED))
    failed_host: str | None = field(default=None, metadata=_shown(RESULT, LISTED, REPORTED))
    failed_exit_code: int | None = field(default=None, metadata=_shown(RESULT, LISTED, REPORTED))
    failed_log: str | None = field(default=None, metadata=_shown(RESULT, LISTED, REPORTED))
    failed_log_tail: list = field(default_factory=list, metadata=_shown(RESULT, REPORTED))
    log_dir: str | None = field(default=None, metadata=_shown(LISTED, REPORTED))
    msg: str | None = field(default=None, metadata=_shown(RESULT, LISTED, REPORTED))
    scheduler: str = field(default="none", metadata=_shown(LISTED))
    job_id: str | None = field(default=None, metadata=_shown(RESULT, LISTED))
    job_state: str | None = field(default=None, metadata=_shown(LISTED, optional=True))
    job_reason: str | None = field(default=None, metadata=_shown(LISTED, optional=True))
    batch_host: str | None = field(default=None, metadata=_shown(LISTED, optional=True))
    job_nodes: list | None = field(default=None, metadata=_shown(optional=True))
    # The run's shape, which labels each line of its output (see `labelled`).
    slots: list = field(default_factory=list)
    head: str | None = None
    mode: str | None = None
    nproc: int | None = None
    started_at: float = 0.0  # sorts the runs
    launcher_log: str | None = None
    # Who holds the run: a live supervisor (this pid, started then, this boot) means running.
    supervisor_pid: int | None = None
    supervisor_start: int | None = None
    boot_id: str | None = None
    launcher_pid: int | None = None
    # Its end.
    timed_out: bool = field(default=False, metadata=_shown(RESULT))
    warnings: list | None = field(default=None, metadata=_shown(optional=True))
    stdout_tail: list | None = field(default=None, metadata=_shown(RESULT, optional=True))
    rank0_tail: list | None = field(default=None, metadata=_shown(RESULT, REPORTED, optional=True))
    stopped_on_nodes: dict | None = field(default=None, metadata=_shown(RESULT, optional=True))
    silent_nodes: list | None = field(default=None, metadata=_shown(RESULT, optional=True))
    survivors: list | None = field(default=None, metadata=_shown(RESULT, optional=True))
    never_started: list | None = field(default=None, metadata=_shown(RESULT, REPORTED, optional=True))
    lost_nodes: dict | None = field(default=None, metadata=_shown(RESULT, LISTED, REPORTED, optional=True))  # {node: since}
    # Restarts (max_restarts): how many, and each attempt (started, ended, nodes, world_size,
    # cause, workers: its torchrun log directory); the last is the one running or that ended the run.
    restarts: int = field(default=0, metadata=_shown(RESULT, LISTED, REPORTED))
    attempts: list | None = field(default=None, metadata=_shown(RESULT, LISTED, REPORTED, optional=True))
    # Nodes back after a loss that the run did not grow to, and why ({node: reason}).
    not_taken_back: dict | None = field(default=None, metadata=_shown(RESULT, LISTED, REPORTED, optional=True))

    @classmethod
    def keys(cls, shown_in: str | None = None) -> tuple:
        """The record's keys, in this order; only those shown in `shown_in` if given."""
        return tuple(key.name for key in fields(cls)
                     if shown_in is None or shown_in in key.metadata.get("shown", ()))

    @classmethod
    def from_dict(cls, data: dict) -> RunRecord:
        """A record as read from state.json (read_state): a key an older record lacks has its
        default."""
        return cls(**_known(cls, data))

    def to_dict(self) -> dict:
        """As state.json holds it: every key, but an optional one only once set."""
        return {key.name: getattr(self, key.name) for key in fields(self)
                if not (key.metadata.get("optional") and getattr(self, key.name) is None)}

    def updated(self, **changes) -> RunRecord:
        """A copy with `changes`; a key the record does not have is an error (TypeError)."""
        return replace(self, **changes)


@dataclass
class SupervisorPlan:
    """What the launch module tells a run's supervisor to do (run.json, no secret in it)."""
    run_id: str
    argv: list  # the launcher's, or sbatch's
    cwd: str | None  # chdir; None: the run's directory
    command: str
    nodes: list  # [{name, address, slots, interface}] in rank order
    head: str
    mode: str
    nproc: int
    world_size: int
    python: str  # the probe's interpreter on every node
    ssh: str | None
    check_nodes: bool  # whether the other nodes take ssh from the head (not PALS)
    control_dir: str | None  # the ssh masters mpirun rides; the supervisor closes them
    launch_timeout: int
    stop_grace: int
    paths: dict  # {run, launcher, ranks, workers}
    scheduler: str = "none"
    sbatch: list | None = None
    start_timeout: int = 0  # seconds to a process of the run on every node; 0: no limit
    heartbeat_timeout: int = 0  # seconds a node may not answer before the run ends; 0: not watched
    worker_files: bool = False  # the ranks' output is read from torchrun's files on each node
    max_restarts: int = 0  # restarts after a failure a restart can help
    min_nodes: int = 0  # the fewest nodes an attempt may use
    restart_wait: int = 300  # seconds a restart waits for min_nodes to answer
    final_exit_codes: list = field(default_factory=list)  # rank exit codes never restarted
    launch_plan: dict | None = None  # the renderer's plan (launch_plan.plan_to_dict): restarts render it again
    # Slurm: batch_script's options for the job (slots, gpus_per_node, walltime, queue, account,
    # whole_nodes, extra_args), with which a restart writes its new job's script.
    batch: dict | None = None
    # A run restarted by hand (torchrun_launch state=restarted): the number of its first attempt
    # here, after those its record lists; 0 for a new run.
    first_attempt: int = 0
    package: str | None = None  # the head package installed for this run's version (its record.py)
    node_dirs: bool = False  # each node's torchrun logs under paths.workers/node<rank> (node_workers)
    # Runs that heal (attempts.py): the nodes an attempt uses at most (0: every node of launch_plan;
    # fewer with spare nodes), how long a node back must keep answering before the run grows to it,
    # and what it must pass then (node_checks.rejoin_request's checks: no secret in them).
    world_nodes: int = 0
    rejoin_after: int = 10
    node_checks: dict | None = None

    @classmethod
    def read(cls, run_dir: str) -> SupervisorPlan:
        with open(os.path.join(run_dir, PLAN_FILE), encoding="utf-8") as handle:
            return cls(**_known(cls, json.load(handle)))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def process_start(pid: int) -> int | None:
    """The process's start time (clock ticks since boot) from /proc: with the boot id, it tells
    a live process from a later one that got the same pid. None when gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == b"Z" else int(fields[19])


def write_state(run_dir: str, record: dict) -> None:
    """Replace the run's record whole: a reader sees the old one or the new one."""
    path = os.path.join(run_dir, STATE_FILE)
    partial = f"{path}.{os.getpid()}.partial"
    try:
        with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640), "w") as handle:
            json.dump(record, handle, indent=1, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    except OSError:
        try:
            os.unlink(partial)
        except OSError:
            pass
        raise


# Space kept for the run's last record: a run that fills its disk still records how it ended.
RESERVE_FILE = "state.reserve"
RESERVE_BYTES = 1 << 20


def reserve_space(run_dir: str) -> None:
    """Take RESERVE_BYTES in the run's directory for its last record (best effort: a disk already
    full, or a file system without fallocate, keeps none)."""
    try:
        fd = os.open(os.path.join(run_dir, RESERVE_FILE), os.O_WRONLY | os.O_CREAT, 0o640)
    except OSError:
        return
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError:
        pass
    finally:
        os.close(fd)


def release_space(run_dir: str) -> None:
    try:
        os.unlink(os.path.join(run_dir, RESERVE_FILE))
    except OSError:
        pass


def supervisor_alive(record: dict) -> bool:
    pid = record.get("supervisor_pid")
    return (bool(pid) and record.get("boot_id") == boot_id()
            and process_start(pid) == record.get("supervisor_start"))


def read_state(run_dir: str) -> dict | None:
    """The run's record; `running` with its supervisor gone reads as `lost`. None if none."""
    try:
        with open(os.path.join(run_dir, STATE_FILE), encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    if record.get("state") in ACTIVE and not supervisor_alive(record):
        # Read, never written: whoever reads it says the same, and none says it runs.
        rebooted = record.get("boot_id") not in (None, boot_id())
        record["state"] = "lost"
        record["msg"] = (f"run {record.get('run_id')} is lost: its supervisor is gone ("
                         + ("the head restarted" if rebooted else "killed, or out of memory")
                         + ") and nothing recorded how the run ended; torchfleet stop "
                         f"{record.get('run_id')} ends whatever is left of it. Logs under {record.get('log_dir')}")
    return record


# The index of an account's runs on the head: a link per run to its directory, wherever its
# log_dir put it (shared storage, a scratch disk), so that every command finds every run.
RUNS_INDEX = "~/.local/state/torchfleet/runs"


def runs_index(account: str = "") -> str:
    """The index of `account`'s runs (this process's account's by default)."""
    return os.path.expanduser(RUNS_INDEX.replace("~", f"~{account}", 1))


def owner_of(log_dir: str) -> str:
    """The account whose runs a log dir, as given, holds: `~ACCOUNT/...` names it; else the owner
    of its nearest directory that exists (root following the training account's runs reads that
    account's index)."""
    if log_dir.startswith("~"):
        return log_dir[1:].split("/", 1)[0]
    path = os.path.abspath(log_dir)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        return pwd.getpwuid(os.stat(path).st_uid).pw_name
    except (OSError, KeyError):
        return ""


def index_run(index: str, run_id: str, run_dir: str) -> None:
    """Add the run to the account's index (made 0700 if missing); replaces a stale link."""
    os.makedirs(index, mode=0o700, exist_ok=True)
    partial = os.path.join(index, f".{run_id}.{os.getpid()}")
    os.symlink(os.path.abspath(run_dir), partial)
    os.replace(partial, os.path.join(index, run_id))


def unindex_run(index: str, run_id: str) -> None:
    try:
        os.unlink(os.path.join(index, run_id))
    except OSError:
        pass


def run_dir_of(log_dir: str, run_id: str, index: str | None = None) -> str:
    """The run's directory: under `log_dir`, else where the index points (a run with a log_dir
    of its own); `log_dir/run_id` when neither holds its record."""
    here = os.path.join(log_dir, run_id)
    if index and not os.path.exists(os.path.join(here, STATE_FILE)):
        try:
            target = os.readlink(os.path.join(index, run_id))
        except OSError:
            return here
        if os.path.exists(os.path.join(target, STATE_FILE)):
            return target
    return here


def list_runs(log_dir: str, run_id: str | None = None, index: str | None = None) -> list[dict]:
    """The records under `log_dir`, and those the account's `index` names elsewhere, newest
    first (run ids sort by their start); only `run_id`'s if given. Directories without a record
    (runs from before records) are left out."""
    if run_id:
        names = [run_id]
    else:
        names = set()
        for where in (log_dir, index):
            try:
                names.update(name for name in os.listdir(where) if not name.startswith(".")) if where else None
            except OSError:
                pass
    records = [read_state(run_dir_of(log_dir, name, index)) for name in sorted(names)]
    found = [record for record in records if record]
    return sorted(found, key=lambda record: (record.get("started_at", 0), record["run_id"]), reverse=True)


def newest_run(log_dir: str, index: str | None = None) -> str | None:
    found = list_runs(log_dir, index=index)
    return found[0]["run_id"] if found else None


# Open MPI's --tag-output: "[JOB,RANK]<stdout>:" before each line of a process (the node's torchrun
# in torchrun mode, the rank itself in rank mode), in launcher.log and in its per-rank files;
# torchrun's --tee: "[defaultLOCAL_RANK]:".
_MPI_TAG = re.compile(r"^\[\d+,(\d+)\]<(?:stdout|stderr|stddiag)>: ?")
# MPICH Hydra's -prepend-rank: "[RANK] " (the node's torchrun in mpich mode).
_HYDRA_TAG = re.compile(r"^\[(\d+)\] ")
_WORKER_TAG = re.compile(r"^\[[A-Za-z_]\w*?(\d+)\]:")
# The launcher's own words that say nothing to the user, kept in launcher.log, never streamed:
# Open MPI 4.1's rsh launcher races its child's exec to set the ssh's process group (the child
# sets it itself, so nothing is wrong) and warns when it loses, in the middle of a healthy run.
LAUNCHER_NOISE = re.compile(r"^\[[^\]\s]+:\d+\] plm:(?:rsh|ssh): Warning: setpgid\(\d+,\d+\) failed in parent "
                            r"with errno=Permission denied\(13\)\s*$")


def untagged(lines: list[str]) -> list[str]:
    """The lines without Open MPI's tag, or else Hydra's; the launcher's noise left out."""
    return [_MPI_TAG.sub("", line) if _MPI_TAG.match(line) else _HYDRA_TAG.sub("", line)
            for line in lines if not LAUNCHER_NOISE.match(line)]


def slot_owner(rank: int, slots) -> int | None:
    """The index of the node an MPI rank runs on when ranks fill each node's slots in order
    (--map-by slot); None beyond the last slot."""
    filled = 0
    for index, count in enumerate(slots):
        filled += count
        if rank < filled:
            return index
    return None


def labelled(line: str, record: dict) -> tuple[int | None, str | None, str]:
    """(global rank or None, node name or None, the line without launcher tags) for a line of
    launcher.log. A line with no rank is the launcher's own (torchrun, mpirun)."""
    nodes, mode = record.get("nodes") or [], record.get("mode")
    tag = (_HYDRA_TAG if mode == "mpich" else _MPI_TAG).match(line)
    if not tag:
        return None, None, line
    process, text = int(tag.group(1)), line[tag.end():]
    if mode == "rank":
        index = slot_owner(process, record.get("slots") or [])
        return process, nodes[index] if index is not None else None, text
    host = nodes[process] if 0 <= process < len(nodes) else None
    worker = _WORKER_TAG.match(text)
    if not worker:
        return None, host, text
    return process * (record.get("nproc") or 1) + int(worker.group(1)), host, text[worker.end():]


def shown_parts(line: str, record: dict, ranks: str) -> tuple[str, str] | None:
    """(label, text) of what a follower prints of a launcher.log line, None for nothing: with
    `ranks` "0" (or "rank:N") that rank's lines bare and the launcher's own messages (mpirun's
    errors); with "all" every line, a rank's labelled `[rank N host] `, a node's torchrun's
    `[host] `; with "node:HOST" those of HOST; with "none" nothing. The launcher's noise
    (LAUNCHER_NOISE) is never shown."""
    if ranks == "none" or LAUNCHER_NOISE.match(line):
        return None
    rank, host, text = labelled(line, record)
    if ranks == "all" or (ranks.startswith("node:") and host == ranks[5:]):
        if rank is not None:
            return f"[rank {rank} {host}] ", text
        return (f"[{host}] ", text) if host else ("", text)
    if ranks.startswith("node:"):
        return None
    if rank == int(ranks.partition(":")[2] or ranks):
        return "", text
    return ("", text) if host is None else None


def shown(line: str, record: dict, ranks: str) -> str | None:
    """A launcher.log line as a follower prints it (see shown_parts), None for nothing."""
    parts = shown_parts(line, record, ranks)
    return None if parts is None else parts[0] + parts[1]


def node_workers(workers: str, index: int) -> str:
    """The torchrun log directory of the attempt's node `index` (its node rank): each node has
    its own, so that a log_dir every node shares never mixes their files."""
    return os.path.join(workers, f"node{index}")


# torchrun's --log-dir on each node: DIR/<rdzv id>_<random>/attempt_<n>/<local rank>/std*.log.
_WORKER_FILE = re.compile(r"attempt_(\d+)[/\\](\d+)[/\\](stdout|stderr)\.log$")
REMOTE_QUIET = 10  # seconds a node's reader may say nothing after the run's end before it is given up
CAUGHT_UP = b"-\n"  # a node's reader has sent what its files held when it started


# A line's pieces, as a follower passes them on (see Tail.pieces). Scripts redraw a line with
# "\r" (tqdm, rich): each redraw a line of its own where the output is a file or a pipe, drawn in
# place on a terminal.
WHOLE = b"L"  # a line that ended, never redrawn: as it was written
REDRAWN = b"P"  # a redraw of a line still open ("\r" ended it): shown as a line, or drawn in place
DRAWING = b"R"  # what a line still open reads now, unended: drawn in place on a terminal, else left
CUT = b"C"  # a piece of a line longer than LINE_CAP: a line of its own everywhere
DONE = b"D"  # the end of a line that was redrawn, drawn or cut: its final state
LINE_CAP = 4 << 20  # bytes of an unended line a reader holds; beyond, it is passed on in pieces
DRAWING_CAP = 1000  # bytes of a drawing passed on: a terminal shows one row of it


def _cut_at(data: bytes, limit: int) -> int:
    """Where to cut `data` at most `limit` bytes in, not inside a UTF-8 character."""
    cut = limit
    while cut > limit - 4 and cut > 0 and data[cut] & 0xC0 == 0x80:
        cut -= 1
    return cut if cut > 0 else limit


class Tail:
    """A growing file, read on from where the last look left it, in pieces of lines: memory is
    bounded by CHUNK and LINE_CAP, whatever the length of a line."""

    def __init__(self, path: str, position: int = 0, redraws: bool = True):
        # Not `redraws`: "\r" is a byte like any other (a launcher's tagged lines, split later).
        self.path, self.position, self.redraws = path, position, redraws
        self.partial = b""  # the open line since its last redraw
        self.drawn = False  # whether a piece of the open line was passed on (it ends with DONE)
        self.said = b""  # the last DRAWING passed on

    def _redraws(self, line: bytes) -> list:
        return line.split(b"\r") if self.redraws else [line]

    def _ended(self, line: bytes) -> tuple:
        self.partial, drawn, self.drawn, self.said = b"", self.drawn, False, b""
        return (DONE if drawn else WHOLE, line)

    def pieces(self, final: bool = False) -> tuple[list, bool]:
        """([(kind, bytes)] since the last look, whether more is waiting). `final`: the writer is
        gone, so an open line is ended too."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.position)
                data = handle.read(CHUNK)
        except FileNotFoundError:
            data = b""
        self.position += len(data)
        more = len(data) == CHUNK
        if not data and not (final and (self.partial or self.drawn)):
            return [], more
        found, lines = [], (self.partial + data).split(b"\n")
        rest = lines.pop()
        for line in lines:
            *redraws, last = self._redraws(line[:-1] if line.endswith(b"\r") else line)
            found += [(REDRAWN, redraw) for redraw in redraws if redraw.strip()]
            self.drawn = self.drawn or bool(redraws)
            found.append(self._ended(last))
        # An "\r" at the very end may be the first half of "\r\n": it waits for the next byte.
        held = rest.endswith(b"\r") and self.redraws
        *redraws, self.partial = self._redraws(rest[:-1] if held else rest)
        found += [(REDRAWN, redraw) for redraw in redraws if redraw.strip()]
        self.drawn = self.drawn or bool(redraws)
        if held:
            self.partial += b"\r"
        if final and not more:
            if self.partial or self.drawn:
                found.append(self._ended(self.partial.rstrip(b"\r")))
            return found, more
        while len(self.partial) > LINE_CAP:
            cut = _cut_at(self.partial, LINE_CAP)
            found.append((CUT, self.partial[:cut]))
            self.partial, self.drawn = self.partial[cut:], True
        drawing = self.partial.rstrip(b"\r")[:DRAWING_CAP] if self.redraws else b""
        if drawing and drawing != self.said and not more:  # with more waiting, it is gone already
            found.append((DRAWING, drawing))
            self.said, self.drawn = drawing, True
        return found, more

    def lines(self, final: bool = False) -> tuple[list, bool]:
        """(the lines ended since the last look, each redraw and piece a line of its own, whether
        more is waiting): the pieces as a file or a pipe shows them."""
        found, more = self.pieces(final)
        return [text for kind, text in found if kind != DRAWING], more


class WorkerFiles:
    """The files torchrun writes for its workers on this node (under `directory`), each read on
    as it grows; only `local_ranks`' if given. Not `from_start`: the files there at the first look
    are read from their end."""

    def __init__(self, directory: str, local_ranks=None, from_start: bool = True):
        self.directory, self.local_ranks, self.from_start = directory, local_ranks, from_start
        self.tails: dict = {}  # path: (local rank, stream: b"o" or b"e", Tail)
        self.looked = False

    def _find(self) -> None:
        pattern = os.path.join(glob.escape(self.directory), "*", "attempt_*", "*", "std*.log")
        for path in sorted(glob.glob(pattern)):
            found = _WORKER_FILE.search(path)
            if path in self.tails or not found:
                continue
            local = int(found.group(2))
            if self.local_ranks is None or local in self.local_ranks:
                start = 0 if self.from_start or self.looked else os.path.getsize(path)
                self.tails[path] = (local, b"o" if found.group(3) == "stdout" else b"e", Tail(path, start))
        self.looked = True

    def read(self, final: bool = False) -> tuple[list, bool]:
        """([(local rank, stream, kind, bytes)], whether more is waiting): what every file holds
        since the last read, each file's pieces in order."""
        self._find()
        found, more = [], False
        for local, stream, tail in self.tails.values():
            pieces, waiting = tail.pieces(final)
            found += [(local, stream, kind, text) for kind, text in pieces]
            more = more or waiting
        return found, more


SERVE_HELLO = b"=2\n"  # what a node's reader says first: its lines are "LOCAL STREAM KIND TEXT"


def serve_worker_lines(directory: str, from_start: bool) -> int:
    """On a node, for the head's follower: SERVE_HELLO, then "LOCAL_RANK STREAM KIND TEXT" for
    every piece of this node's worker files (see Tail.pieces), as they grow, until stdin closes
    (the run has ended); then the rest, and exit."""
    files, final, caught_up = WorkerFiles(directory, None, from_start), False, False
    out = sys.stdout.buffer
    out.write(SERVE_HELLO)
    while True:
        found, more = files.read(final)
        for local, stream, kind, text in found:
            out.write(b"%d %s %s %s\n" % (local, stream, kind, text))
        if not more and not caught_up:  # what the files held at the start has been sent
            out.write(CAUGHT_UP)
            caught_up = True
        if found or caught_up is True:
            out.flush()
            caught_up = caught_up or None
        if final and not more:
            return 0
        if not more and not final and select.select([sys.stdin], [], [], POLL)[0]:
            final = not os.read(sys.stdin.fileno(), 4096)


class NodeReader:
    """The worker files of one other node, read there by `serve_worker_lines` over the cluster's
    ssh; a thread puts (this reader, local rank, line) on `lines`, then (this reader, None,
    error or None). `group`: the attempt's nodes, in rank order; `index`: this node's among them."""

    def __init__(self, index: int, node: dict, plan: dict, source: str, directory: str,
                 from_start: bool, lines, group=None):
        remote = shlex.join([plan["python"], "-S", "-c", source, "serve", directory,
                             "start" if from_start else "now"])
        self.index, self.name, self.lines, self.group = index, node["name"], lines, group
        self.heard, self.caught_up = time.monotonic(), False
        # As the training account (the run directory's owner), whose key and known_hosts reach
        # the nodes, also where root follows the run.
        mine = directory
        while not os.path.isdir(mine) and os.path.dirname(mine) != mine:  # another node's: not here
            mine = os.path.dirname(mine)
        owner = os.stat(mine)
        account = {"user": owner.st_uid, "group": owner.st_gid, "extra_groups": []} \
            if os.geteuid() == 0 and owner.st_uid != 0 else {}
        self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [plan["ssh"], "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", node["address"], remote],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **account)
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        pieces = False  # a reader of this version says so first; an older one sends whole lines
        for raw in self.proc.stdout:
            self.heard = time.monotonic()
            if raw == CAUGHT_UP:
                self.caught_up = True
                continue
            if raw == SERVE_HELLO:
                pieces = True
                continue
            if pieces:
                local, stream, kind, text = raw[:-1].split(b" ", 3)
            else:
                (local, text), stream, kind = raw.rstrip(b"\n").split(b" ", 1), b"o", WHOLE
            self.lines.put((self, int(local), stream, kind, text))
        self.caught_up = True
        said = self.proc.stderr.read().decode("utf-8", "replace").strip().splitlines()
        rc = self.proc.wait()
        self.lines.put((self, None, None, None, (said[-1] if said else f"ssh exited {rc}") if rc else None))

    def finish(self) -> None:
        """The run has ended: the node's reader sends the rest of its files, then exits."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass


class RunOutput:
    """A run's output as a follower shows it (see `shown`): launcher.log on the head, and where
    the ranks' output is not copied there (SupervisorPlan.worker_files), torchrun's worker files:
    the head's read here, the other nodes' through a NodeReader each. A restarted run has a
    directory of worker files per attempt (the record's attempts), each with its own nodes."""

    def __init__(self, run_dir: str, record: dict, ranks: str, from_start: bool):
        self.record, self.ranks, self.run_dir, self.from_start = record, ranks, run_dir, from_start
        self.launcher = Tail(os.path.join(run_dir, LAUNCHER_LOG), redraws=False)
        if not from_start:
            try:
                self.launcher.position = os.path.getsize(self.launcher.path)
            except OSError:
                pass
        self.head_files, self.readers, self.followed = [], [], set()
        self.queue = queue.Queue(maxsize=1024)  # bounded: a slow reader holds the nodes back
        try:
            with open(os.path.join(run_dir, PLAN_FILE), encoding="utf-8") as handle:
                self.plan = json.load(handle)
        except (OSError, ValueError):
            self.plan = {}
        if ranks == "none" or not self.plan.get("worker_files"):
            self.plan = {}
        self.source = None
        self.update(record)

    def update(self, record: dict) -> None:
        """Follow the worker files of every attempt the record names that is not followed yet."""
        self.record = record
        if not self.plan:
            return
        # A Slurm job's nodes, in rank order, are known once it runs (or it never ran).
        slurm = self.plan.get("scheduler") == "slurm"
        attempts = record.get("attempts") or [
            {"workers": self.plan["paths"]["workers"], "job_nodes": record.get("job_nodes"),
             "nodes": record.get("nodes") or [node["name"] for node in self.plan["nodes"]]}]
        for attempt in attempts:
            if slurm and not attempt.get("job_nodes"):
                continue
            if attempt.get("workers") and attempt["workers"] not in self.followed:
                # The first look honours from_start; an attempt that begins later is read whole.
                self._follow(attempt["workers"], list(attempt["nodes"]), self.from_start or bool(self.followed))
                self.followed.add(attempt["workers"])

    def _follow(self, directory: str, group: list, from_start: bool) -> None:
        nproc, by_name = self.plan["nproc"], {node["name"]: node for node in self.plan["nodes"]}
        # {index in the group: its local ranks to show, None for all}: rank = index * nproc + local.
        if self.ranks == "all":
            wanted = dict.fromkeys(range(len(group)))
        elif self.ranks.startswith("node:"):
            wanted = {group.index(self.ranks[5:]): None} if self.ranks[5:] in group else {}
        else:
            rank = int(self.ranks.partition(":")[2] or self.ranks)
            wanted = {rank // nproc: {rank % nproc}} if rank < nproc * len(group) else {}
        for index, locals_ in wanted.items():
            # Runs of an older torchfleet: every node's files straight under the directory.
            own = node_workers(directory, index) if self.plan.get("node_dirs") else directory
            if group[index] == self.plan["head"]:
                self.head_files.append((group, index, WorkerFiles(own, locals_, from_start)))
                continue
            if self.source is None:  # this file, from the head package the run started from
                package = self.plan.get("package") or os.path.join(self.run_dir, "supervisor", "_head")
                with open(os.path.join(package, "record.py"), encoding="utf-8") as handle:
                    self.source = handle.read()
            reader = NodeReader(index, by_name[group[index]], self.plan, self.source, own, from_start,
                                self.queue, group)
            reader.wanted = locals_
            self.readers.append(reader)

    def _worker_piece(self, group: list, index: int, local: int, stream: bytes, kind: bytes, text: bytes) -> tuple:
        """(kind, key, text) of a piece of a worker's output, as shown: `key` names its file."""
        label = "" if self.ranks == "0" or self.ranks.startswith("rank:") else \
            f"[rank {index * self.plan['nproc'] + local} {group[index]}] "
        return kind.decode(), f"{group[index]}/{local}{stream.decode()}", label + text.decode("utf-8", "replace")

    def _launcher_pieces(self, kind: bytes, raw: bytes) -> list:
        """A launcher.log line as shown: its redraws ("\r") split once its tag is read."""
        parts = shown_parts(raw.decode("utf-8", "replace"), self.record, self.ranks)
        if parts is None:
            return []
        label, text = parts
        if kind == CUT or "\r" not in text:
            return [(kind.decode(), "launcher", label + text)]
        *redraws, last = text.split("\r")
        key = "launcher/" + label.strip().replace(" ", "_")
        return [("P", key, label + redraw) for redraw in redraws if redraw.strip()] + [("D", key, label + last)]

    def caught_up(self) -> bool:
        """Whether every node's reader has sent what its files held when it started."""
        return all(reader.caught_up for reader in self.readers)

    def read(self, final: bool) -> tuple[list, bool]:
        """([(kind, key, text)] to show, whether more is waiting now): the pieces of lines (see
        Tail.pieces; kind as a str), `key` naming the file each comes from."""
        found, more = self.launcher.pieces(final)
        shown_pieces = [piece for kind, raw in found for piece in self._launcher_pieces(kind, raw)]
        for group, index, files in self.head_files:
            pieces, waiting = files.read(final)
            shown_pieces += [self._worker_piece(group, index, *piece) for piece in pieces]
            more = more or waiting
        while len(shown_pieces) < 4096:
            try:
                reader, local, stream, kind, text = self.queue.get_nowait()
            except queue.Empty:
                break
            if local is None:
                self.readers = [other for other in self.readers if other is not reader]
                if text:
                    shown_pieces.append(("L", "", f"[{reader.name}] torchfleet: its worker logs could not "
                                                  f"be read from the head: {text}"))
            elif reader.wanted is None or local in reader.wanted:
                shown_pieces.append(self._worker_piece(reader.group, reader.index, local, stream, kind, text))
        return shown_pieces, more or not self.queue.empty()

    def finish(self):
        """The run has ended: every node's rest, in batches of lines; a node's reader is given
        up after REMOTE_QUIET seconds of silence (a node lost with the run)."""
        for reader in self.readers:
            reader.finish()
        while True:
            lines, more = self.read(final=True)
            if lines or more:
                yield lines
                continue
            quiet = [r for r in self.readers if time.monotonic() - r.heard > REMOTE_QUIET]
            for reader in quiet:
                reader.proc.kill()
            if not self.readers:
                return
            time.sleep(POLL)


def follow(run_dir: str, ranks: str = "0", from_start: bool = True, wait_start: float = 30,
           out=None, until_end: bool = True, tail: int | None = None) -> dict:
    """Print the run's output as it is written (LINE-prefixed and PIECES, see `RunOutput`) until the run has
    ended (or, not `until_end`, what there is now), then its record (END-prefixed, JSON);
    returns the record. `tail`: of what was written before, only the last `tail` lines."""
    out = out or sys.stdout
    deadline = time.monotonic() + wait_start
    record = read_state(run_dir)
    while record is None:  # the supervisor writes the record as it starts
        if time.monotonic() >= deadline:
            record = {"state": "unknown", "msg": f"no run record in {run_dir}"}
            out.write(END + json.dumps(record) + "\n")
            out.flush()
            return record
        time.sleep(POLL)
        record = read_state(run_dir)
    output, said = RunOutput(run_dir, record, ranks, from_start), None
    held = [collections.deque(maxlen=tail)] if tail else [None]  # until caught up: the last lines

    def write(pieces):
        if held[0] is not None:  # a drawing is not a line: none is held
            held[0].extend(piece for piece in pieces if piece[0] != "R")
            return
        for kind, key, text in pieces:
            out.write(LINE + text + "\n" if kind == "L" else f"{kind} {key} {text}\n")
        if pieces:
            out.flush()

    def release():
        if held[0] is not None:
            lines, held[0] = list(held[0]), None
            write(lines)
    while True:
        # A scheduler's job: its state and Slurm's reason, each time they change (pending, running).
        if record.get("state") in ACTIVE and record.get("job_state") and record.get("msg") != said:
            said = record.get("msg")
            out.write(STATUS + said + "\n")
            out.flush()
        if record.get("state") not in ACTIVE or not until_end:
            # The launcher's last words and the ranks' were written before the record.
            for lines in output.finish():
                write(lines)
            release()
            out.write(END + json.dumps(record) + "\n")
            out.flush()
            return record
        lines, more = output.read(final=False)
        write(lines)
        if not more and output.caught_up():
            release()
        if not more:
            time.sleep(POLL)
            record = read_state(run_dir) or record
            output.update(record)


def main(argv: list[str]) -> int:
    """follow|print RUN_DIR_OR_LOG_DIR [RANKS [FROM_START [TAIL]]]: the newest run when given the log
    dir; print: what the log holds now, and the record. serve WORKERS_DIR [FROM_START]: on a
    node, its worker files for the head's follower."""
    if len(argv) >= 2 and argv[0] == "serve":
        try:
            return serve_worker_lines(argv[1], (argv[2] if len(argv) > 2 else "start") == "start")
        except BrokenPipeError:  # the head's follower went
            return 0
    if len(argv) < 2 or argv[0] not in ("follow", "print"):
        sys.stderr.write("usage: follow|print RUN_DIR|LOG_DIR [0|all|none|rank:N|node:HOST] [start|now] [TAIL]\n")
        return 2
    where = os.path.expanduser(argv[1])
    if not os.path.exists(os.path.join(where, STATE_FILE)):
        # LOG_DIR/RUN_ID of a run with a log_dir of its own: its account's index knows where it is.
        index = runs_index(owner_of(argv[1]))
        indexed = run_dir_of(os.path.dirname(where), os.path.basename(where), index)
        run_id = None if indexed != where else newest_run(where, index)
        if indexed != where:
            where = indexed
        elif run_id is None:
            sys.stdout.write(END + json.dumps({"state": "unknown", "msg": f"no run under {where}"}) + "\n")
            return 0
        else:
            where = run_dir_of(where, run_id, index)
    ranks = argv[2] if len(argv) > 2 else "0"
    from_start = (argv[3] if len(argv) > 3 else "start") == "start"
    tail = int(argv[4]) if len(argv) > 4 else None
    try:
        follow(where, ranks, from_start, until_end=argv[0] == "follow", tail=tail)
    except BrokenPipeError:  # the reader went (the torchfleet command ended); the run goes on
        return 0
    return 0


if __name__ == "__main__":
    # Run as its own program on the head, not inside a module: an exit status, not exit_json.
    raise SystemExit(main(sys.argv[1:]))
