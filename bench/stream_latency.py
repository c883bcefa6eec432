"""A run's output, live: how long a line a rank writes takes to reach the terminal of
`torchfleet launch`, and how long `torchfleet launch --detach` takes to return against a
hand-typed mpirun's start, side by side in the same rounds.

(latency) `torchfleet launch bench/tick.py`, attached: rank 0 prints `TICK i WALLCLOCK` every
  0.25 s; each line's arrival on the launcher's stdout, minus the time in it, is its latency
  (the containers share this machine's clock). Median and worst of every line of every round.
(a) the hand-typed start: `ssh head mpirun ... python tick.py` until rank 0's first line is on
  this machine's terminal (then it is left to finish);
(b) `torchfleet launch --detach bench/tick.py` until it returns (every node's ranks have
  started); then `torchfleet wait` (not timed). Both start the same job, one plain Python rank
  per node (rank mode); the latency rounds use torchrun mode, the path of a real training run.

    python bench/stream_latency.py -i inventory/local.yml --runs 5

Writes bench/results/stream_latency.json. Needs a cluster setup.yml has prepared.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchlib import REPO, commit, run_timed  # bench/ is the script's directory, first on sys.path
from launch_overhead import hand_command, inventory_nodes

TICKS = ["--lines", "30", "--interval", "0.25"]


def stream_latencies(inventory):
    """Latencies (s) of every TICK line of one attached launch, as its stdout delivers them."""
    argv = ["torchfleet", "launch", "bench/tick.py", "-i", inventory, "-e", "nproc_per_node=1", "--", *TICKS]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    found = []
    for line in proc.stdout:
        arrived = time.time()
        if line.startswith("TICK "):
            found.append(arrived - float(line.split()[2]))
    if proc.wait() != 0:
        sys.exit(f"torchfleet launch failed (rc {proc.returncode})")
    return found


def hand_start(hosts, cluster_vars):
    """Seconds from typing the hand-written mpirun line to rank 0's first line on this terminal."""
    argv = hand_command(hosts, cluster_vars, 1, tiny=True, rank_script="tick.py --lines 3 --interval 0.1")
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = None
    for line in proc.stdout:
        if first is None and "TICK 0 " in line:
            first = round(time.monotonic() - started, 3)
    if proc.wait() != 0 or first is None:
        sys.exit(f"the hand-typed mpirun failed (rc {proc.returncode})")
    return first


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default="inventory/local.yml")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "stream_latency.json"))
    args = parser.parse_args()
    hosts, cluster_vars = inventory_nodes(args.inventory)
    # The same job as the hand-typed one: one plain Python rank per node (rank mode, no torchrun).
    detach = ["torchfleet", "launch", "--detach", "bench/tick.py", "-i", args.inventory,
              "-e", "nproc_per_node=1", "-e", "launch_mode=rank", "--", *TICKS]
    wait = ["torchfleet", "wait", "-i", args.inventory]
    run_timed(detach)  # the first launch puts tick.py on the nodes, for the hand runs too
    run_timed(wait)
    latencies, starts = [], {"a_hand_mpirun_start": [], "b_launch_detach_return": []}
    for round_ in range(args.runs):  # alternate, so drift in machine load hits every way alike
        latencies += stream_latencies(args.inventory)
        starts["a_hand_mpirun_start"].append(hand_start(hosts, cluster_vars))
        starts["b_launch_detach_return"].append(run_timed(detach)[0])
        run_timed(wait)
        print(f"run {round_ + 1}: {len(latencies)} lines so far, median latency "
              f"{statistics.median(latencies) * 1000:.0f} ms; hand start {starts['a_hand_mpirun_start'][-1]:.2f} s, "
              f"detach {starts['b_launch_detach_return'][-1]:.2f} s", flush=True)
    medians = {name: round(statistics.median(values), 3) for name, values in starts.items()}
    report = {
        "commit": commit(), "nodes": len(hosts), "runs": args.runs, "lines": len(latencies),
        "latency_ms": {"median": round(statistics.median(latencies) * 1000, 1),
                       "worst": round(max(latencies) * 1000, 1), "best": round(min(latencies) * 1000, 1)},
        "start_seconds": starts, "median_start_seconds": medians,
        "ratio_b/a": round(medians["b_launch_detach_return"] / medians["a_hand_mpirun_start"], 3),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({key: report[key] for key in ("lines", "latency_ms", "median_start_seconds", "ratio_b/a")}, indent=2))


if __name__ == "__main__":
    main()
