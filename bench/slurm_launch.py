"""Time to the first epoch: `torchfleet launch --scheduler slurm` (an sbatch job; Slurm starts
mpirun's daemons) against `torchfleet launch` (mpirun over ssh from the head), on the same nodes,
side by side in the same rounds.

Each round runs both ways, attached, with the same training (`examples/train.py`, synthetic data,
2 workers per node), and times from the command's start to rank 0's "epoch 1/" line on this
machine's stdout, and to the command's end. The order alternates, so drift in the machine's load
hits both alike.

    torchfleet cluster up --slurm --nodes 3 && ansible-playbook setup.yml -i inventory -e scheduler=slurm
    python bench/slurm_launch.py -i inventory/local.yml --runs 5

Writes bench/results/slurm_launch.json.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchlib import REPO, commit  # bench/ is the script's directory, first on sys.path

TRAIN = ["examples/train.py", "-e", "nproc_per_node=2", "--", "--use-syn", "--no-wandb", "--epochs", "2",
         "--out-dir", "/tmp"]


def first_epoch(inventory, scheduler):
    """(seconds to rank 0's first epoch line, seconds to the end) of one attached launch."""
    argv = ["torchfleet", "launch", "-i", inventory, *(["--scheduler", scheduler] if scheduler else []), *TRAIN]
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = None
    for line in proc.stdout:
        if first is None and line.startswith("epoch 1/"):
            first = round(time.monotonic() - started, 3)
    err = proc.stderr.read()
    if proc.wait() != 0 or first is None:
        sys.exit(f"{' '.join(argv)} failed (rc {proc.returncode}):\n{err[-3000:]}")
    return first, round(time.monotonic() - started, 3)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default="inventory/local.yml")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "slurm_launch.json"))
    args = parser.parse_args()
    ways = {"a_ssh": "none", "b_slurm": "slurm"}  # explicit: with Slurm set up, slurm is the default
    first_epoch(args.inventory, "none")  # puts the script on the nodes; not counted
    found = {name: {"first_epoch": [], "end": []} for name in ways}
    for round_ in range(args.runs):
        order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
        for name in order:
            first, end = first_epoch(args.inventory, ways[name])
            found[name]["first_epoch"].append(first)
            found[name]["end"].append(end)
        print(f"run {round_ + 1}: first epoch ssh {found['a_ssh']['first_epoch'][-1]:.2f} s, "
              f"slurm {found['b_slurm']['first_epoch'][-1]:.2f} s", flush=True)
    medians = {name: {key: round(statistics.median(values), 3) for key, values in times.items()}
               for name, times in found.items()}
    report = {
        "commit": commit(), "runs": args.runs, "training": TRAIN, "seconds": found, "median_seconds": medians,
        "ratio_first_epoch_b/a": round(medians["b_slurm"]["first_epoch"] / medians["a_ssh"]["first_epoch"], 3),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({key: report[key] for key in ("median_seconds", "ratio_first_epoch_b/a")}, indent=2))


if __name__ == "__main__":
    main()
