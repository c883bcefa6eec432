"""Wheel spread: what a cold setup.yml with the real Python environment costs the controller, at 2, 4
and 8 nodes, before and after the wheelhouse spread inside the cluster, side by side in one run.

For each size, for each of two checkouts (BEFORE, a commit that copied every wheel from the
controller to every node, run from a git worktree; and this checkout), in one run: a fresh
cluster of that many nodes (the scale bench's image: Open MPI and python3-venv baked in, so apt
downloads do not swamp the figures), then a cold `setup.yml` with the default environment
(PyTorch's CPU build, numpy, the NCCL wheel). The controller's wheelhouse is already filled
(one PyPI download, before the first size; the earlier commit keeps its own, since it cannot
read a lock with hashes), so the figures are the cluster's alone. Records wall
time, the bytes the controller sent into the cluster's network (an iptables counter in OUTPUT:
ssh, Ansible's modules and the wheels; not the traffic between nodes), the bytes each node
received (eth0), and the ratios of the largest size to the smallest, and after/before.

    python bench/wheel_spread.py                       # 2 4 8, before = 24210a9
    python bench/wheel_spread.py --sizes 2 4 --before REV

Writes bench/results/wheel_spread.json. Run as root from the checkout's root; uses its own fact
cache, key and cluster name (tfspread), and removes the cluster and the worktree at the end.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import REPO, commit
from scale import SCALE_IMAGE, bake_image
sys.path.insert(0, str(REPO))
from torchfleet import devcluster  # noqa: E402

NAME = "tfspread"
BEFORE = "24210a9"  # the last commit that copied every wheel to every node
BEFORE_WHEELHOUSE = Path.home() / ".cache" / "torchfleet" / "wheelhouse-before"


def wheelhouse_bytes():
    """Size of the controller's largest wheelhouse (the default spec's), wheels only."""
    root = Path.home() / ".cache" / "torchfleet" / "wheelhouse"
    sizes = [sum(f.stat().st_size for f in d.glob("*.whl")) for d in root.iterdir() if d.is_dir()]
    return max(sizes, default=0)


def prefill_before():
    """The earlier commit's wheelhouse: the same wheels (hard links), its lock without hashes, so
    neither side downloads during the figures."""
    for spec in (Path.home() / ".cache" / "torchfleet" / "wheelhouse").iterdir():
        lock = spec / "requirements.lock"
        if not lock.exists():
            continue
        target = BEFORE_WHEELHOUSE / spec.name
        target.mkdir(parents=True, exist_ok=True)
        for wheel in spec.glob("*.whl"):
            if not (target / wheel.name).exists():
                os.link(wheel, target / wheel.name)
        (target / "requirements.lock").write_text(
            "".join(line.split(" --hash=")[0] + "\n" for line in lock.read_text().splitlines() if line))


def measure(size, checkout, work, extra=()):
    env = dict(os.environ, XDG_STATE_HOME=str(work / "state"), ANSIBLE_CACHE_PLUGIN_CONNECTION=str(work / "facts"))
    inventory = work / "inventory.yml"
    devcluster.up(name=NAME, nodes=size, inventory=inventory, image=SCALE_IMAGE)
    containers = [f"tf-{NAME}-node{i}" for i in range(size)]
    argv = ["ansible-playbook", "setup.yml", "-i", str(inventory),
            "-e", f"ssh_trust_key_file={work / 'keys' / 'cluster_ed25519'}", *extra]
    received = devcluster.received_bytes(containers)
    with devcluster.ControllerTraffic(NAME) as traffic:
        started = time.monotonic()
        result = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, check=False)
        elapsed = round(time.monotonic() - started, 1)
        sent = traffic.sent()
    if result.returncode != 0:
        sys.exit(f"setup failed at {size} nodes in {checkout}:\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}")
    after = devcluster.received_bytes(containers)
    per_node = [after[c] - received[c] for c in containers]
    return {"nodes": size, "setup_s": elapsed, "controller_sent_bytes": sent,
            "node_received_bytes": per_node, "node_received_max": max(per_node),
            "node_received_min": min(per_node)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "wheel_spread.json"))
    args = parser.parse_args()
    bake_image()
    prefill_before()
    worktree = Path(tempfile.mkdtemp(prefix="tfspread-before-"))
    subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.before], cwd=REPO, check=True,
                   capture_output=True)
    checkouts = {"before": worktree, "after": REPO}
    rows = {"before": [], "after": []}
    try:
        for size in args.sizes:
            for label, checkout in checkouts.items():
                devcluster.down(NAME)  # every run starts cold
                # The earlier commit reads a lock without hashes: it keeps a wheelhouse of its own.
                extra = ["-e", f"python_env_wheelhouse_root={BEFORE_WHEELHOUSE}"] if label == "before" else []
                with tempfile.TemporaryDirectory(prefix="tfspread-") as work:
                    rows[label].append(measure(size, checkout, Path(work), extra))
                print(json.dumps({label: rows[label][-1]}), flush=True)
    finally:
        devcluster.down(NAME)
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, check=False)
    ratios = {}
    for label, found in rows.items():
        first, last = found[0], found[-1]
        span = f"{last['nodes']}/{first['nodes']} nodes"
        for key in ("setup_s", "controller_sent_bytes", "node_received_max"):
            ratios[f"{label} {key} {span}"] = round(last[key] / first[key], 3)
    for before, after in zip(rows["before"], rows["after"]):
        for key in ("setup_s", "controller_sent_bytes"):
            ratios[f"after/before {key} at {before['nodes']} nodes"] = round(after[key] / before[key], 3)
    report = {"commit": commit(), "before": args.before, "image": SCALE_IMAGE, "host_cpus": os.cpu_count(),
              "wheelhouse_bytes": wheelhouse_bytes(), "rows": rows, "ratios": ratios}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(ratios, indent=2))


if __name__ == "__main__":
    main()
