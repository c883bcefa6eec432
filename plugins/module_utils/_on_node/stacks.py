"""The ranks' Python stacks, taken on their nodes when an attempt hung (progress.py).

Every rank arms Python's faulthandler on STACK_SIGNAL at its start (SITE, a sitecustomize.py
the launch puts on the ranks' PYTHONPATH): a C-level handler that writes every thread's stack
without waiting for the interpreter. A rank blocked in C code (a collective, a lock, a read)
never returns to the interpreter, so a Python-level handler would never run; py-spy reads the
stacks from outside, but needs ptrace (CAP_SYS_PTRACE, often refused in containers and to
non-root users) and a binary on every node. Each rank names its file after its rank and pid,
so only processes that armed the handler get the signal, whose default action would end them.
Standard library only: the probe carries it to the nodes.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import time

# A real-time signal nothing else of a training stack uses (Slurm and Lightning use SIGUSR1/2).
STACK_SIGNAL_OFFSET = 4
STACK_SIGNAL = signal.SIGRTMIN + STACK_SIGNAL_OFFSET
STACKS_DIR = "stacks"  # under the run's directory: attempt_N/rank_R.PID.txt (TORCHFLEET_STACKS_DIR)
READ_LIMIT = 256 * 1024  # bytes kept of one rank's stacks
DUMP_WAIT = 2.0  # seconds the ranks have to write their stacks

# Imported by every Python process started with the run's PYTHONPATH; arms only a rank of a
# torchfleet run (RANK and TORCHFLEET_STACKS_DIR set), and never fails the rank.
SITE = '''"""torchfleet: arms faulthandler in each rank, so that a hung run's stacks can be taken."""
import os
def _arm():
    import faulthandler, signal
    rank, stacks = os.environ.get("RANK"), os.environ.get("TORCHFLEET_STACKS_DIR")
    if rank is None or not stacks or not rank.isdigit():
        return
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
    """{rank: its stacks as faulthandler wrote them} of the attempt's ranks on this node: each
    process that armed the handler for the run (its file names it, its environment says the run)
    is signalled, and its file read after `wait` s."""
    where = os.path.join(run_dir, STACKS_DIR, f"attempt_{attempt}")
    signalled = {}
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
            os.kill(pid, STACK_SIGNAL)
        except OSError:
            continue
        signalled[int(found.group(1))] = path
    if signalled:
        time.sleep(wait)
    taken = {}
    for rank, path in signalled.items():
        try:
            with open(path, "rb") as handle:
                taken[rank] = handle.read(READ_LIMIT).decode("utf-8", "replace")
        except OSError:
            continue
    return taken


_KEPT = re.compile(r"/attempt_(\d+)/rank_(\d+)\.txt$")


def kept_stacks(run_dir: str) -> dict:
    """{"attempt_N": {rank: text}} of the stacks the supervisor kept on the head (none taken: {})."""
    kept: dict = {}
    for path in glob.glob(os.path.join(glob.escape(run_dir), STACKS_DIR, "attempt_*", "rank_*.txt")):
        found = _KEPT.search(path)
        if not found or os.path.islink(path):
            continue
        try:
            with open(path, "rb") as handle:
                text = handle.read(READ_LIMIT).decode("utf-8", "replace")
        except OSError:
            continue
        kept.setdefault(f"attempt_{found.group(1)}", {})[int(found.group(2))] = text
    return {attempt: dict(sorted(ranks.items())) for attempt, ranks in sorted(kept.items())}


def top_frames(text: str, count: int = 3) -> list[str]:
    """The innermost `count` frames of the thread that took the signal (faulthandler's "Current
    thread", the main one), else of the first thread listed."""
    blocks = [block for block in re.split(r"\n\s*\n", text.strip()) if block.strip()]
    current = [block for block in blocks if block.lstrip().startswith("Current thread")]
    chosen = (current or blocks or [""])[0]
    return [line.strip() for line in chosen.splitlines()[1:] if line.strip().startswith("File ")][:count]
