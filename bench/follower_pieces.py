"""The head's follower on a rank's progress bar and on one very long line, this version against
an earlier one side by side in the same run (no cluster: the follower reads files as it does on
the head, through `python3 -S -c PROGRAM follow`, as the torchfleet command runs it: this
version's follower.PROGRAM, the earlier one's record.py, a program by itself).

(bar) a worker's stderr gets `\\rstep N WALLCLOCK` every 0.2 s for 30 steps, then its newline:
  for each step, the time from its write to the follower's first line that carries it (a
  drawing or a redraw); the earlier follower passes on nothing before the line ends.
(huge) a worker's stdout gets one line of 64 MiB, in writes of 1 MiB, then its newline: the
  follower's peak resident memory, and the time from the last byte written to the last piece
  passed on.

    python bench/follower_pieces.py --against 92fc650

Writes bench/results/follower_pieces.json.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchlib import REPO, commit  # bench/ is the script's directory, first on sys.path
sys.path.insert(0, str(REPO / ".collections"))

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import ssh_to_nodes, follower  # noqa: E402

RECORD = "plugins/module_utils/_head/record.py"  # the earlier version's follower (its path then)


def _run_dir(root: Path) -> tuple[Path, Path]:
    """A run directory whose ranks write only torchrun's files on the head, as the launch leaves it."""
    run_dir = root / "r1"
    workers = run_dir / "workers" / "r1_x" / "attempt_0" / "0"
    workers.mkdir(parents=True)
    plan = {"worker_files": True, "paths": {"workers": str(run_dir / "workers")}, "head": "n0", "nproc": 1,
            "nodes": [{"name": "n0", "address": "n0"}], "python": sys.executable, "ssh": "ssh"}
    (run_dir / "run.json").write_text(json.dumps(plan))
    return run_dir, workers


def _record(run_dir: Path, state: str) -> None:
    me = os.getpid()
    with open(f"/proc/{me}/stat", "rb") as handle:
        start = int(handle.read().rsplit(b")", 1)[1].split()[19])
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
        boot = handle.read().strip()
    record = {"run_id": "r1", "state": state, "rc": 0 if state == "succeeded" else None, "nodes": ["n0"],
              "slots": [1], "mode": "torchrun", "nproc": 1, "supervisor_pid": me, "supervisor_start": start,
              "boot_id": boot}
    (run_dir / "state.json.partial").write_text(json.dumps(record))
    os.replace(run_dir / "state.json.partial", run_dir / "state.json")


class Follower:
    """`python3 -S -c PROGRAM follow RUN_DIR` here, each line of its output timed as it comes."""

    def __init__(self, program: str, run_dir: Path):
        self.proc = subprocess.Popen([sys.executable, "-S", "-c", program, "follow", str(run_dir)],
                                     stdout=subprocess.PIPE)
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.proc.stdout:
            self.lines.append((time.time(), raw))

    def end(self) -> int:
        """Its peak resident memory (KiB), once it has ended."""
        _pid, _status, usage = os.wait4(self.proc.pid, 0)
        self.reader.join(timeout=30)
        return usage.ru_maxrss


def progress_bar(program: str) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        run_dir, workers = _run_dir(Path(scratch))
        _record(run_dir, "running")
        running = Follower(program, run_dir)
        written = {}
        with open(workers / "stderr.log", "w", encoding="utf-8") as log:
            for step in range(30):
                written[step] = time.time()
                log.write(f"\rstep {step} {written[step]:.6f}")
                log.flush()
                time.sleep(0.2)
            log.write("\n")
            log.flush()
            ended = time.time()
        time.sleep(0.5)
        _record(run_dir, "succeeded")
        running.end()
    seen = {}
    for arrived, raw in running.lines:
        for step in re.findall(rb"step (\d+) ", raw):
            seen.setdefault(int(step), arrived - written[int(step)])
    latencies = [seen[step] for step in sorted(seen)]
    return {"steps_seen_live": sum(1 for step in seen if written[step] + seen[step] < ended),
            "steps": 30, "median_s": statistics.median(latencies) if latencies else None,
            "worst_s": max(latencies) if latencies else None}


def huge(program: str) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        run_dir, workers = _run_dir(Path(scratch))
        _record(run_dir, "running")
        running = Follower(program, run_dir)
        piece = b"y" * (1 << 20)
        with open(workers / "stdout.log", "wb") as log:
            for _piece in range(64):
                log.write(piece)
                log.flush()
            log.write(b"\n")
            log.flush()
        written = time.time()
        time.sleep(1.0)
        _record(run_dir, "succeeded")
        peak = running.end()
    carrying = [arrived for arrived, raw in running.lines if b"yyyy" in raw]
    received = sum(raw.count(b"y") for _arrived, raw in running.lines)
    return {"peak_rss_mib": round(peak / 1024, 1), "bytes_passed_on": received,
            "last_piece_after_s": round(carrying[-1] - written, 3) if carrying else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="92fc650", help="the earlier commit to compare with")
    args = parser.parse_args()
    programs = {"this": ssh_to_nodes.program(follower.PROGRAM, "follower"),
                args.against: subprocess.run(["git", "show", f"{args.against}:{RECORD}"], cwd=REPO, check=True,
                                             capture_output=True, text=True).stdout}
    found = {name: {"bar": progress_bar(program), "huge": huge(program)} for name, program in programs.items()}
    result = {"commit": commit(), "against": args.against, "results": found}
    out = REPO / "bench" / "results" / "follower_pieces.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
