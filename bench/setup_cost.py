"""Setup cost: a cold setup.yml on three fresh nodes, then a warm one, in one run.

Cold: new containers and an empty wheelhouse on the controller (so PyTorch and the rest are
downloaded, once for all nodes). Warm: the same command again; it must change nothing.
Records both wall times, the warm run's `changed` count per node and warm/cold (aim: 0.25 or less).

    python bench/setup_cost.py            # three nodes
    python bench/setup_cost.py --keep-wheelhouse   # cold nodes, wheels already on the controller

Writes bench/results/setup_cost.json. Run from the checkout's root; uses its own cluster (tfcost),
fact cache and key, and removes the cluster at the end.
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from benchlib import REPO, commit, recap, run_timed  # bench/ is the script's directory, first on sys.path
sys.path.insert(0, str(REPO))
from torchfleet import devcluster  # noqa: E402

NAME = "tfcost"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--keep-wheelhouse", action="store_true",
                        help="use the controller's usual wheelhouse cache instead of an empty one")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "setup_cost.json"))
    args = parser.parse_args()
    devcluster.down(NAME)
    with tempfile.TemporaryDirectory(prefix="tfcost-") as work:
        work = Path(work)
        env = dict(os.environ, XDG_STATE_HOME=str(work / "state"), ANSIBLE_CACHE_PLUGIN_CONNECTION=str(work / "facts"))
        inventory = work / "inventory.yml"
        try:
            devcluster.up(name=NAME, nodes=args.nodes, inventory=inventory)
            argv = ["ansible-playbook", "setup.yml", "-i", str(inventory),
                    "-e", f"ssh_trust_key_file={work / 'keys' / 'cluster_ed25519'}"]
            if not args.keep_wheelhouse:
                argv += ["-e", f"python_env_wheelhouse_root={work / 'wheelhouse'}"]
            cold, cold_result = run_timed(argv, env)
            print(f"cold: {cold:.1f} s", flush=True)
            warm, warm_result = run_timed(argv, env)
            print(f"warm: {warm:.1f} s", flush=True)
        finally:
            devcluster.down(NAME)
    cold_recap, warm_recap = recap(cold_result.stdout), recap(warm_result.stdout)
    nodes = {host: counts for host, counts in warm_recap.items() if host != "localhost"}
    report = {"commit": commit(), "nodes": args.nodes, "empty_wheelhouse": not args.keep_wheelhouse,
              "cold_s": cold, "warm_s": warm, "warm/cold": round(warm / cold, 3),
              "cold_changed": {h: c["changed"] for h, c in cold_recap.items() if h != "localhost"},
              "warm_changed": {h: c["changed"] for h, c in nodes.items()},
              "warm_changed_total": sum(c["changed"] for c in nodes.values())}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
