"""What the benchmarks share: a command run and timed from the checkout's root, a play recap read,
the commit measured."""

import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_timed(argv, env=None, cwd=REPO):
    """(wall seconds, result) of `argv`; a failure ends the benchmark with the end of its output,
    as no figure of a failed run means anything."""
    started = time.monotonic()
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = round(time.monotonic() - started, 3)
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv[:2])} failed (rc {result.returncode}):\n{result.stdout[-3000:]}\n"
                 f"{result.stderr[-2000:]}")
    return elapsed, result


def recap(output):
    """{host: {ok: N, changed: N, ...}} from the PLAY RECAP."""
    return {host: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", fields)}
            for host, fields in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M)}


def commit():
    """The checkout's commit, short, as the figures' label."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, check=False).stdout.strip()
