"""torchft on this machine: what a replica group's SIGKILL costs the others, and how one started
again heals, with the Lighthouse's heartbeat timeout at 1 s beside its 5-s default.

Two replica groups (each its own `torchrun --standalone --nproc-per-node 1`, gloo, CPU) train
examples/train_ft.py against one Lighthouse, as `--fault-tolerance torchft` is meant to run them
one per node. Once group 1 has trained STEPS_BEFORE_KILL steps its whole process group is
SIGKILLed, and started again RESTART_AFTER s later. For each heartbeat timeout:
- the survivor's longest gap between two steps from the kill until the new group trains;
- the step the new group healed at (torchft's "healing is required ... max_step=N") and the
  seconds from its start to its first step;
- whether both groups end with the same parameters (a checksum of them, train_ft.py's result).

Needs a Python environment with torch and torchft (`--python`); setup's own environment on a
node has them once torchft is in python_env_packages. Writes bench/results/torchft_replicas.json.

    python bench/torchft_replicas.py --python /opt/torchfleet/envs/default/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "train_ft.py"
STEPS, STEPS_BEFORE_KILL, RESTART_AFTER, PORT = 900, 60, 12, 29610
STEP = re.compile(r"TORCHFLEET_STEP (\d+) .* t=(\S+)")
HEALED = re.compile(r"healing is required step=\d+, max_step=(\d+)")


def steps_of(path: Path) -> list[tuple[float, int]]:
    return [(float(t), int(s)) for s, t in STEP.findall(path.read_text(errors="replace"))]


def result_of(path: Path) -> dict:
    found = re.findall(r"TORCHFLEET_RESULT (.*)", path.read_text(errors="replace"))
    return json.loads(found[-1]) if found else {}


def kill_group(group: int) -> None:
    """SIGKILL every process of replica group `group` (its torchrun and the workers, which torchrun
    starts in sessions of their own), as a node's loss would."""
    mark = f"REPLICA_GROUP_ID={group}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                if mark in handle.read().split(b"\0"):
                    os.kill(int(pid), signal.SIGKILL)
        except OSError:
            continue  # gone, or not ours to read


def one_case(python: str, heartbeat_ms: int, where: Path) -> dict:
    where.mkdir(parents=True, exist_ok=True)
    bindir = os.path.dirname(python)
    lighthouse = subprocess.Popen([os.path.join(bindir, "torchft_lighthouse"), "--min_replicas", "1",
                                   "--bind", f"[::]:{PORT}", "--heartbeat_timeout_ms", str(heartbeat_ms),
                                   "--join_timeout_ms", "100"],
                                  stdout=open(where / "lighthouse.log", "w"), stderr=subprocess.STDOUT)

    def start(group: int, name: str) -> subprocess.Popen:
        env = dict(os.environ, TORCHFT_LIGHTHOUSE=f"http://127.0.0.1:{PORT}", REPLICA_GROUP_ID=str(group),
                   NUM_REPLICA_GROUPS="2")
        return subprocess.Popen([os.path.join(bindir, "torchrun"), "--standalone", "--nproc-per-node", "1",
                                 str(SCRIPT), "--steps", str(STEPS), "--sleep", "0.05", "--timeout", "5"],
                                env=env, stdout=open(where / name, "w"), stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        survivor, victim = start(0, "group0.log"), start(1, "group1.log")
        deadline = time.monotonic() + 600
        while len(steps_of(where / "group1.log")) < STEPS_BEFORE_KILL:
            assert time.monotonic() < deadline and victim.poll() is None, "group 1 never trained"
            time.sleep(0.2)
        killed = time.time()
        kill_group(1)  # torchrun's workers run in sessions of their own: every process of the group
        victim.wait()
        time.sleep(RESTART_AFTER)
        restarted = time.time()
        again = start(1, "group1.again.log")
        rcs = (survivor.wait(timeout=600), again.wait(timeout=600))
    finally:
        lighthouse.terminate()
        lighthouse.wait()
    kept, back = steps_of(where / "group0.log"), steps_of(where / "group1.again.log")
    rejoined = back[0][0] if back else time.time()
    times = [at for at, _step in kept]
    gaps = [later - at for at, later in zip(times, times[1:]) if killed <= later and at <= rejoined + 5]
    healed = HEALED.findall((where / "group1.again.log").read_text(errors="replace"))
    results = (result_of(where / "group0.log"), result_of(where / "group1.again.log"))
    return {
        "heartbeat_timeout_ms": heartbeat_ms, "rcs": rcs,
        "survivor_longest_gap_s": round(max(gaps, default=0.0), 3),
        "survivor_steps_while_out": sum(1 for at in times if killed <= at < rejoined),
        "healed_at_step": int(healed[-1]) if healed else None,
        "start_to_first_step_s": round(rejoined - restarted, 1) if back else None,
        "same_parameters": bool(results[0]) and results[0].get("params_sha256") == results[1].get("params_sha256"),
        "checksums": [result.get("params_sha256") for result in results],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="a Python with torch and torchft")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "torchft_replicas.json"))
    args = parser.parse_args()
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"torchft-replicas-{os.getpid()}"
    cases = [one_case(args.python, heartbeat, scratch / str(heartbeat)) for heartbeat in (1000, 5000)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip()
    longest = [case["survivor_longest_gap_s"] for case in cases]
    report = {"commit": commit, "steps": STEPS, "killed_after_steps": STEPS_BEFORE_KILL,
              "restarted_after_s": RESTART_AFTER, "cases": cases,
              "gap_ratio_1s_over_5s": round(longest[0] / longest[1], 2) if longest[1] else None}
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
