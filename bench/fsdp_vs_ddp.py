"""FSDP against DDP: time per epoch of examples/train_fsdp.py with --strategy fsdp and ddp, the same
model, data, steps and workers, launched through launch.yml on one set-up cluster, alternating,
in one run.

    python bench/fsdp_vs_ddp.py -i inventory/local.yml                     # 3 rounds, 2 workers per node
    python bench/fsdp_vs_ddp.py -i INV --rounds 5 --nproc-per-node 1 --launch-mode mpich

Each launch trains --epochs epochs without a checkpoint (so the figures are the training's) and
reports every epoch's time; the first epoch of each launch (process group warm-up, first
all-gathers) is left out. Records the median, min and max epoch time of each strategy and the
ratio of the medians (fsdp / ddp). Writes bench/results/fsdp_vs_ddp.json.
"""

import argparse
import json
import statistics
import sys

from benchlib import REPO, commit, run_timed


def result_line(output: str) -> dict:
    unescaped = output.replace('\\"', '"')
    if "TORCHFLEET_RESULT " not in unescaped:
        sys.exit(f"no TORCHFLEET_RESULT in the launch's output:\n{output[-3000:]}")
    return json.JSONDecoder().raw_decode(unescaped.rsplit("TORCHFLEET_RESULT ", 1)[1])[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("-i", "--inventory", required=True, help="a cluster setup.yml has made ready")
    parser.add_argument("--rounds", type=int, default=3, help="launches of each strategy, alternating")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--nproc-per-node", type=int, default=2)
    parser.add_argument("--launch-mode", default="torchrun")
    args = parser.parse_args()
    times = {"fsdp": [], "ddp": []}
    world_size = None
    for _round in range(args.rounds):
        for strategy in times:
            script_args = ["--strategy", strategy, "--epochs", str(args.epochs), "--no-checkpoint"]
            argv = ["ansible-playbook", "launch.yml", "-i", args.inventory,
                    "-e", "script=examples/train_fsdp.py", "-e", f"launch_mode={args.launch_mode}",
                    "-e", f"nproc_per_node={args.nproc_per_node}",
                    "-e", json.dumps({"script_args": script_args})]
            result = run_timed(argv)[1]
            report = result_line(result.stdout)
            world_size = report["world_size"]
            times[strategy] += report["epoch_times"][1:]
            print(f"{strategy}: epoch times {report['epoch_times']}", flush=True)
    summary = {name: {"median_s": round(statistics.median(values), 4), "min_s": round(min(values), 4),
                      "max_s": round(max(values), 4), "epochs": len(values)} for name, values in times.items()}
    ratio = round(summary["fsdp"]["median_s"] / summary["ddp"]["median_s"], 3)
    figures = {"commit": commit(), "world_size": world_size, "launch_mode": args.launch_mode,
               "nproc_per_node": args.nproc_per_node, "rounds": args.rounds, "epochs_per_launch": args.epochs,
               "epoch_time": summary, "fsdp_over_ddp": ratio}
    out = REPO / "bench" / "results" / "fsdp_vs_ddp.json"
    out.write_text(json.dumps(figures, indent=1) + "\n")
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
