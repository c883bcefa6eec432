"""Render time of a large plan: the renderer that the module and `torchfleet render` share.

    python bench/render_plan.py --nodes 10000 --repeat 20

Writes the median and best of --repeat renders to bench/results/render_plan.json (aim: 50 ms or
less for 10,000 nodes).
"""

import argparse
import ipaddress
import json
import statistics
import sys
import time
from pathlib import Path

from benchlib import REPO, commit  # bench/ is the script's directory, first on sys.path
sys.path.insert(0, str(REPO / ".collections"))

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import Node, Plan  # noqa: E402
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_request import LaunchRequest  # noqa: E402
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.renderer import render  # noqa: E402


def plan(nodes):
    first = ipaddress.IPv4Address("10.0.0.1")
    members = tuple(Node(name=f"gpu{i:05d}", address=str(first + i), slots=8, interface="ib0") for i in range(nodes))
    request = LaunchRequest(head=members[0].name, script="/shared/train.py", script_args=["--epochs", "3"])
    return Plan(request=request, nodes=members, run_id="bench", hostfile_path="/tmp/hostfile",
                env_pass=("WANDB_PROJECT",), env_secrets=("WANDB_API_KEY",))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "render_plan.json"))
    args = parser.parse_args()
    big = plan(args.nodes)
    seconds = []
    for repetition in range(args.repeat):
        started = time.perf_counter()
        rendered = render(big)
        seconds.append(time.perf_counter() - started)
    assert rendered.hostfile.count("\n") == args.nodes
    report = {"commit": commit(), "nodes": args.nodes, "repeat": args.repeat,
              "median_ms": round(statistics.median(seconds) * 1000, 2), "best_ms": round(min(seconds) * 1000, 2),
              "aim_ms": 50}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
