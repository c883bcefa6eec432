"""The ranks' Python stacks, taken on their nodes when an attempt hung (progress.py).

Every rank arms Python's faulthandler on STACK_SIGNAL at its start (SITE, a sitecustomize.py
the launch puts on the ranks' PYTHONPATH): a C-level handler that writes every thread's stack
without waiting for the interpreter. A rank blocked in C code (a collective, a lock, a read)
never returns to the interpreter, so a Python-level handler would never run; py-spy reads the
stacks from outside, but needs ptrace (CAP_SYS_PTRACE, often refused in containers and to
non-root users) and a binary on every node. Each rank names its file after its rank and pid,
so only processes that armed the handler get the signal, whose default action would end them.
torch's flight recorder (the collectives each rank entered, for gloo as for NCCL) is switched on
in every rank, and dumped beside the stacks when they are taken: a thread of each rank waits on
a fifo (rank_R.PID.fr) and writes the dump as JSON when the taker opens it, since only Python
code can call torch's dump and a signal handler in Python would never run in a blocked rank.
NCCL also dumps on its own watchdog timeout (TORCH_NCCL_DUMP_ON_TIMEOUT).
Standard library only: the probe carries it to the nodes.
"""

from __future__ import annotations

import glob
import os
import json
import re
import signal
import stat
import time

# A real-time signal nothing else of a training stack uses (Slurm and Lightning use SIGUSR1/2).
STACK_SIGNAL_OFFSET = 4
STACK_SIGNAL = signal.SIGRTMIN + STACK_SIGNAL_OFFSET
STACKS_DIR = "stacks"  # under the run's directory: attempt_N/rank_R.PID.txt (TORCHFLEET_STACKS_DIR)
READ_LIMIT = 256 * 1024  # bytes kept of one rank's stacks
DUMP_WAIT = 2.0  # seconds the ranks have to write their stacks and flight recorder
COLLECTIVES_LIMIT = 64 * 1024 * 1024  # bytes of a rank's flight recorder dump read on its node

# Imported by every Python process started with the run's PYTHONPATH; arms only a rank of a
# torchfleet run (RANK and TORCHFLEET_STACKS_DIR set), and never fails the rank.
SITE = '''"""torchfleet: arms faulthandler in each rank, so that a hung run's stacks can be taken."""
import os
def _arm():
    import faulthandler, signal
    rank, stacks = os.environ.get("RANK"), os.environ.get("TORCHFLEET_STACKS_DIR")
    if rank is None or not stacks or not rank.isdigit():
        return
    # A rank's helpers (DataLoader or compile workers, anything it starts) inherit its environment:
    # the rank alone arms, and names itself for its children (the same pid: an exec of itself).
    armed = os.environ.get("TORCHFLEET_STACKS_PID")
    if armed not in (None, str(os.getpid())):
        return
    os.environ["TORCHFLEET_STACKS_PID"] = str(os.getpid())
    where = os.path.join(stacks, "attempt_" + os.environ.get("TORCHFLEET_RESTART_COUNT", "0"))
    os.makedirs(where, exist_ok=True)
    # NCCL's flight recorder on, its dump on NCCL's own timeout beside the stacks, unless the user
    # set either name of a pair (PyTorch renamed them; both are read).
    trace = os.path.join(where, "nccl_trace_rank_")
    for names, value in ((("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"), "2000"),
                         (("TORCH_NCCL_DUMP_ON_TIMEOUT",), "1"),
                         (("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"), trace)):
        if not any(name in os.environ for name in names):
            os.environ.update(dict.fromkeys(names, value))
    handle = open(os.path.join(where, "rank_%s.%d.txt" % (rank, os.getpid())), "w")
    faulthandler.register(signal.SIGRTMIN + STACK_SIGNAL_OFFSET, file=handle, all_threads=True, chain=False)
    globals()["_torchfleet_stacks"] = handle  # kept open for the handler
    fifo = os.path.join(where, "rank_%s.%d.fr" % (rank, os.getpid()))
    os.mkfifo(fifo, 0o600)
    import threading
    threading.Thread(target=_torchfleet_flight_recorder, args=(fifo,), daemon=True,
                     name="torchfleet-flight-recorder").start()
def _torchfleet_flight_recorder(fifo):
    """Dumps torch's flight recorder as JSON beside the stacks each time the taker opens the fifo."""
    import json, signal, sys
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN + STACK_SIGNAL_OFFSET})  # the stacks are the rank's
    while True:
        with open(fifo, "rb") as asked:
            asked.read()
        try:
            c10d, dumps = sys.modules.get("torch._C._distributed_c10d"), {}
            for name in ("_dump_nccl_trace_json", "_dump_fr_trace_json"):
                if hasattr(c10d, name):
                    try:
                        dumps[name] = json.loads(getattr(c10d, name)())
                    except Exception:  # noqa: BLE001  # no such process group here
                        pass
            with open(fifo + ".part", "w") as out:
                json.dump(dumps, out)
            os.replace(fifo + ".part", fifo[:-len(".fr")] + ".collectives.json")
        except Exception:  # noqa: BLE001  # the rank goes on without it
            pass
try:
    _arm()
except Exception:  # noqa: BLE001  # a rank runs without it rather than fail
    pass
'''.replace("STACK_SIGNAL_OFFSET", str(STACK_SIGNAL_OFFSET))

_FILE = re.compile(r"rank_(\d+)\.(\d+)\.txt$")


def site_dir(home: str) -> str:
    """Where the ranks' sitecustomize.py is on every node: in the training account's home, which
    no other account can write (a log_dir may be shared by every account, and the ranks execute
    this file), and not in the run's directory, which the launch makes only once its checks
    passed. The same file for every run."""
    return os.path.join(home, ".local", "share", "torchfleet", "site")


def site_file(where: str) -> str:
    return os.path.join(where, "sitecustomize.py")


def take(run_id: str, run_dir: str, attempt: int, wait: float = DUMP_WAIT) -> dict:
    """{rank: {"stacks": its stacks as faulthandler wrote them, "collectives": torch's flight
    recorder in short (collectives_summary), "entered": {process group: its newest collective}}}
    of the attempt's ranks on this node: each process that armed the handler for the run (its file
    names it, its environment says the run) is signalled and asked for its flight recorder, and
    its files read once each has written both, or after `wait` s. The whole dump stays beside the
    stacks, on this node."""
    where = os.path.join(run_dir, STACKS_DIR, f"attempt_{attempt}")
    signalled, before = {}, {}
    for path in sorted(glob.glob(os.path.join(glob.escape(where), "rank_*.txt"))):
        found = _FILE.search(path)
        if not found or os.path.islink(path):
            continue
        pid = int(found.group(2))
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
            if f"TORCHFLEET_RUN_ID={run_id}".encode() not in environ:
                continue  # gone, and its pid another process's now
            stem = path[:-len(".txt")]
            before[stem] = (os.lstat(path).st_size, _inode(stem + ".collectives.json"))
            os.kill(pid, STACK_SIGNAL)
        except OSError:
            continue
        signalled[int(found.group(1))] = stem
        _ask_flight_recorder(stem + ".fr")
    deadline = time.monotonic() + wait
    while signalled and time.monotonic() < deadline:
        waiting = [stem for stem in signalled.values() if not _written(stem, *before[stem])]
        if not waiting:
            break
        time.sleep(0.05)
        # Asked again until it answers: a request is lost while the recorder's thread is not yet
        # (or, between two dumps, not again) waiting on its fifo, which a busy node makes likely.
        for stem in waiting:
            _ask_flight_recorder(stem + ".fr")
    taken: dict[int, dict] = {}
    for rank, stem in signalled.items():
        try:
            text = read_regular(stem + ".txt", READ_LIMIT).decode("utf-8", "replace")
        except OSError:
            continue
        collectives, entered = collectives_summary(_read_json(stem + ".collectives.json"))
        taken[rank] = {"stacks": text, "collectives": collectives, "entered": entered}
    return taken


def _inode(path: str) -> int | None:
    try:
        return os.lstat(path).st_ino
    except OSError:
        return None


def _written(stem: str, stack_size: int, dump_inode: int | None) -> bool:
    """Whether a rank wrote its stacks and its flight recorder's dump since it was asked: the one
    grew, the other is a new file (the recorder writes it whole, os.replace)."""
    try:
        grew = os.lstat(stem + ".txt").st_size > stack_size
    except OSError:
        return False
    return grew and _inode(stem + ".collectives.json") not in (None, dump_inode)


def read_regular(path: str, limit: int) -> bytes:
    """The first `limit` bytes of the plain file at `path`, never through a link nor from a fifo
    (a rank, or the account, may plant either in the run's directory: a reader would follow the
    one and block on the other). OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a plain file")
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            return handle.read(limit)
    finally:
        if fd >= 0:
            os.close(fd)


def _ask_flight_recorder(fifo: str) -> None:
    """Open the rank's fifo, which its flight recorder's thread waits on (none waiting: nothing)."""
    try:
        if not stat.S_ISFIFO(os.lstat(fifo).st_mode):
            return
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass  # ENXIO: no reader, the rank is gone or never armed it


def _read_json(path: str):
    try:
        return json.loads(read_regular(path, COLLECTIVES_LIMIT))
    except (OSError, ValueError):
        return None


def collectives_summary(dumps) -> tuple[str, dict]:
    """(text, {process group id: the newest collective its rank entered}) of a rank's flight
    recorder dumps ({torch's dump function: its JSON}): per process group, how far its
    collectives were enqueued and completed, and the newest one. ("", {}) when there was none."""
    lines, entered = [], {}
    for name, dump in sorted((dumps or {}).items()) if isinstance(dumps, dict) else ():
        if not isinstance(dump, dict) or not isinstance(dump.get("pg_status"), dict):
            continue
        entries = [entry for entry in dump.get("entries") or [] if isinstance(entry, dict)]
        lines.append(f"torch's flight recorder ({name}, {len(entries)} entries):")
        for group, status in sorted(dump["pg_status"].items())[:32]:
            status = status if isinstance(status, dict) else {}
            mine = [entry for entry in entries if str(entry.get("pg_id")) == str(group)]
            newest = max(mine, key=lambda entry: entry.get("record_id") or 0) if mine else None
            label = newest.get("process_group") if newest else None
            label = label[1] if isinstance(label, list) and len(label) > 1 else ""
            enqueued = _as_int(status.get("last_enqueued_collective"))
            lines.append(f"  process group {group}{f' ({label})' if label else ''}: collectives enqueued up to "
                         f"#{enqueued}, completed up to #{_as_int(status.get('last_completed_collective'))}")
            if newest:
                lines.append(f"    newest: #{newest.get('collective_seq_id')} {newest.get('profiling_name')}, "
                             f"{newest.get('state')}, sizes {newest.get('input_sizes')}")
            if enqueued is not None:
                entered[str(group)] = enqueued
    return "\n".join(lines), entered


def _as_int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def behind(entered: dict) -> dict:
    """{rank: (its newest collective, the others' newest)} of the ranks that did not enter the
    newest collective of the default process group ("0") the others entered: where a collective
    hangs, the ranks not inside it. `entered`: {rank: {process group: newest collective}}."""
    newest = {rank: groups["0"] for rank, groups in entered.items() if isinstance(groups.get("0"), int)}
    if len(newest) < 2:
        return {}
    top = max(newest.values())
    return {rank: (seq, top) for rank, seq in sorted(newest.items()) if seq < top}


_KEPT = re.compile(r"/attempt_(\d+)/rank_(\d+)\.txt$")


def kept_stacks(run_dir: str) -> dict:
    """{"attempt_N": {rank: text}} of the stacks the supervisor kept on the head, each followed by
    its flight recorder in short where one was kept (none taken: {})."""
    kept: dict = {}
    for path in glob.glob(os.path.join(glob.escape(run_dir), STACKS_DIR, "attempt_*", "rank_*.txt")):
        found = _KEPT.search(path)
        if not found:
            continue
        try:
            text = read_regular(path, READ_LIMIT).decode("utf-8", "replace")
        except OSError:
            continue
        try:
            beside = read_regular(path[:-len(".txt")] + ".collectives.txt", READ_LIMIT).decode("utf-8", "replace")
            text = text.rstrip("\n") + "\n\n" + beside
        except OSError:
            pass  # none kept (no torch in the rank), or not a plain file
        kept.setdefault(f"attempt_{found.group(1)}", {})[int(found.group(2))] = text
    return {attempt: dict(sorted(ranks.items())) for attempt, ranks in sorted(kept.items())}


def top_frames(text: str, count: int = 3) -> list[str]:
    """The innermost `count` frames of the thread that took the signal (faulthandler's "Current
    thread", the main one), else of the first thread listed that is not the flight recorder's."""
    blocks = [block for block in re.split(r"\n\s*\n", text.strip())
              if block.strip() and "in _torchfleet_flight_recorder" not in block]
    current = [block for block in blocks if block.lstrip().startswith("Current thread")]
    chosen = (current or blocks or [""])[0]
    return [line.strip() for line in chosen.splitlines()[1:] if line.strip().startswith("File ")][:count]
