"""The cluster tests' ranks: examples/train.py against tests/integration/ticker.py, alternating, in one run.

Each round launches, on a set-up cluster, one worker a node of each script for the same seconds
of sleep: train.py's four epochs of five steps with 0.4 s asleep after each (the tests' TRAINING)
and the ticker's 20 ticks of 0.4 s (no torch imported by the ranks; torchrun's agents import it
either way). For each it records the wall time, the controller's CPU (ansible-playbook, its forks
and ssh) and the CPU of the cluster's containers, and prints medians and the ratios ticker / train.

    python bench/cluster_test_ranks.py -i inventory/local.yml --rounds 3

Writes bench/results/cluster_test_ranks.json. Needs a cluster setup.yml has prepared (run from the
checkout's root), on this machine's Docker for the containers' CPU.
"""

import argparse
import json
import statistics
import sys

from benchlib import REPO, commit, inventory_hosts, timed  # bench/ is the script's directory, first on sys.path

SCRIPTS = {
    "train": ["-e", "script=examples/train.py", "-e", json.dumps({"script_args": [
        "--use-syn", "--no-wandb", "--epochs", "4", "--steps-per-epoch", "5", "--sleep", "0.4", "--out-dir", "/tmp"]})],
    "ticker": ["-e", "script=tests/integration/ticker.py", "-e", json.dumps({"script_args": [
        "--ticks", "20", "--sleep", "0.4"]})],
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default="inventory")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    containers = inventory_hosts(args.inventory)
    figures = {name: [] for name in SCRIPTS}
    for number in range(args.rounds):
        for name, extra in SCRIPTS.items():
            argv = ["ansible-playbook", "launch.yml", "-i", args.inventory, "-e", "nproc_per_node=1", *extra]
            figures[name].append(timed(argv, None, containers)[:3])
            print(f"round {number + 1} {name}: wall, controller, containers {figures[name][-1]}", file=sys.stderr)
    report = {"commit": commit(), "rounds": args.rounds, "inventory": args.inventory, "results": {}}
    for name, rows in figures.items():
        wall, controller, nodes = (statistics.median(column) for column in zip(*rows))
        report["results"][name] = {"wall_s": wall, "controller_cpu_s": controller, "containers_cpu_s": nodes,
                                   "cpu_s": round(controller + nodes, 2), "runs": rows}
    train, ticker = report["results"]["train"], report["results"]["ticker"]
    report["ratio_ticker_to_train"] = {key: round(ticker[key] / train[key], 3) for key in ("wall_s", "cpu_s")}
    out = REPO / "bench" / "results" / "cluster_test_ranks.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({name: {k: v for k, v in fig.items() if k != "runs"} for name, fig in report["results"].items()}
                     | {"ratio": report["ratio_ticker_to_train"]}, indent=1))


if __name__ == "__main__":
    main()
