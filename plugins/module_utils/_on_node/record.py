"""A run's record on the head, and the supervisor's plan.

Each run has a directory on the head (`log_dir/RUN_ID`). Its supervisor keeps `state.json`
there (a RunRecord): run id, command, nodes, world size, started, state, rc, duration, the
failure's details. It is replaced whole (write, then rename), so a reader never sees half a
record. A record that says `running` while its supervisor is gone (killed, OOM, the head
rebooted) reads as `lost`. Beside it, `run.json` (a SupervisorPlan) is what the launch module
told the supervisor to run. An account's index of runs finds each run's directory.

The launch module, the supervisor, torchrun_run_info and the torchfleet command import this
file; the follower (follower.py) carries it to the head as part of its `python3 -S -c` program.
So it imports only the standard library, and nothing of its package.
"""

from __future__ import annotations

import enum
import json
import os
import pwd
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:  # read() imports it: the follower's program (follower.PROGRAM) goes without it
    from .launch_request import LaunchRequest

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
    HUNG = "hung"  # no progress for hang_timeout while every node was alive (progress.py)
    LOST = "lost"  # its supervisor died: its guardian ended it, or nobody recorded how it ended


ACTIVE = (RunState.STARTING.value, RunState.RUNNING.value, RunState.RESTARTING.value)
ENDED = (RunState.SUCCEEDED.value, RunState.FAILED.value, RunState.STOPPED.value, RunState.TIMED_OUT.value,
         RunState.HUNG.value)


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
    # The run's shape, which labels each line of its output (see labels.labelled).
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
    # Each rank's last progress in the current attempt ({rank: {node, last, step}}, progress.py),
    # and a hung attempt's verdict ({since, timeout, stopped_first: [rank...], named, and
    # outside_collective: [rank...] where torch's flight recorder showed ranks the others waited for}).
    progress: dict | None = field(default=None, metadata=_shown(LISTED, optional=True))
    hung: dict | None = field(default=None, metadata=_shown(RESULT, LISTED, REPORTED, optional=True))
    # fault_tolerance torchft: each node's replica group ({node: {group, state, starts, restarts,
    # since, cause}}, replica_groups.py).
    groups: dict | None = field(default=None, metadata=_shown(RESULT, LISTED, REPORTED, optional=True))
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


class OlderPlan(ValueError):
    """A run.json that an older torchfleet wrote, in a form this one does not read."""


@dataclass
class SupervisorPlan:
    """What the launch module tells a run's supervisor to do (run.json, no secret in it): the
    launch request (`request`, every module option, as _launch_resolution.stored keeps it; read back,
    its options are attributes: plan.request.max_restarts) and what the launch resolved for it."""
    run_id: str
    request: LaunchRequest  # redacted: no secret's value, no file's contents
    argv: list  # the launcher's, or sbatch's
    cwd: str | None  # chdir; None: the run's directory
    command: str
    nodes: list  # the first attempt's nodes [{name, address, slots, interface}] in rank order
    nproc: int
    world_size: int
    ssh: str | None
    control_dir: str | None  # the ssh masters mpirun rides; the supervisor closes them
    paths: dict  # {run, launcher, ranks, workers}
    sbatch: list | None = None
    worker_files: bool = False  # the ranks' output is read from torchrun's files on each node
    fewest_nodes: int = 0  # the fewest nodes an attempt may use: min_nodes, or the first attempt's
    # The environment as the launch resolved it on the head: the names passed (env_pass, PATH and
    # the like added), the values set; the secrets' names are the request's.
    env_pass: list = field(default_factory=list)
    env_set: dict = field(default_factory=dict)
    # Slurm: batch_script's options for the job (slots, gpus_per_node, walltime, queue, account,
    # whole_nodes, extra_args), with which a restart writes its new job's script.
    batch: dict | None = None
    # A run restarted by hand (torchrun_launch state=restarted): the attempts its record lists
    # from before (this supervisor's first attempt is numbered that); 0 for a new run.
    attempts_before: int = 0
    package: str | None = None  # the head package installed for this run's version (its line server)
    node_dirs: bool = False  # each node's torchrun logs under paths.workers/node<rank> (node_workers)
    # Runs that heal (attempts.py): the nodes an attempt uses at most (0: every node of the
    # request; fewer with spare nodes), and what a node back must pass before the run grows to
    # it (node_checks.rejoin_request's checks: no secret in them).
    world_nodes: int = 0
    node_checks: dict | None = None

    @property
    def head(self) -> str:
        return cast(str, self.request.head)  # a plan's request has its head (required to start)

    @classmethod
    def read(cls, run_dir: str) -> SupervisorPlan:
        """The plan in run_dir's run.json; OlderPlan for one without a request (written by a
        torchfleet before the request was kept whole)."""
        with open(os.path.join(run_dir, PLAN_FILE), encoding="utf-8") as handle:
            values = _known(cls, json.load(handle))
        if not isinstance(values.get("request"), dict):
            raise OlderPlan(f"{run_dir}/{PLAN_FILE} keeps no launch request: an older torchfleet wrote it")
        from .launch_request import LaunchRequest  # pylint: disable=import-outside-toplevel

        return cls(**{**values, "request": LaunchRequest.from_stored(values["request"])})

    def to_json(self) -> str:
        return json.dumps({**asdict(replace(self, request=cast("LaunchRequest", None))), "request": self.request.stored()}, indent=1)


def request_value(plan: dict, key: str):
    """An option of the request in run.json's plain form: under `request`, or (a run.json an older
    torchfleet wrote) at the top."""
    return (plan.get("request") or plan).get(key)


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
    pid = record.get("supervisor_pid") or 0
    return (bool(pid) and record.get("boot_id") == boot_id()
            and process_start(pid) == record.get("supervisor_start"))


def _record_on_disk(run_dir: str) -> dict | None:
    try:
        with open(os.path.join(run_dir, STATE_FILE), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def read_state(run_dir: str) -> dict | None:
    """The run's record; `running` with its supervisor gone reads as `lost`. None if none."""
    record = _record_on_disk(run_dir)
    if record is None:
        return None
    if record.get("state") in ACTIVE and not supervisor_alive(record):
        # A supervisor writes its run's last record, then exits: one that did so between the
        # read above and the look at it ended its run, which is not lost.
        again = _record_on_disk(run_dir)
        if again is not None and again.get("state") not in ACTIVE:
            return again
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
    (runs from before records), another account's, or whose record names another run are left out."""
    names: list[str] | set[str]
    if run_id:
        names = [run_id]
    else:
        names = set()
        for where in (log_dir, index):
            try:
                names.update(name for name in os.listdir(where) if not name.startswith(".")) if where else None
            except OSError:
                pass
    found = []
    for name in sorted(names):
        run_dir = run_dir_of(log_dir, name, index)
        record = read_state(run_dir) if own_run_dir(run_dir) else None
        if record and record.get("run_id") == name:
            found.append(record)
    return sorted(found, key=lambda record: (record.get("started_at", 0), record["run_id"]), reverse=True)


def own_run_dir(run_dir: str) -> bool:
    """Whether a run directory is this account's: another account's, in a log_dir every account
    may write, is not, whatever its record says (docs/security.md)."""
    try:
        return os.lstat(os.path.realpath(run_dir)).st_uid == os.geteuid()
    except OSError:
        return False


def newest_run(log_dir: str, index: str | None = None) -> str | None:
    found = list_runs(log_dir, index=index)
    return found[0]["run_id"] if found else None


def node_workers(workers: str, index: int) -> str:
    """The torchrun log directory of the attempt's node `index` (its node rank): each node has
    its own, so that a log_dir every node shares never mixes their files."""
    return os.path.join(workers, f"node{index}")


if __name__ == "__main__":
    # Run alone only by the follower of an earlier torchfleet, which served another node's worker
    # files with record.py: its words for that node, rather than no lines at all.
    raise SystemExit("this run's head package serves worker files with line_server.py: follow the run "
                     "with the torchfleet that started it, or a newer one")
