"""Launch overhead: the same short DDP job started by hand and by torchfleet, alternating, in one run.

(a) a hand-written `mpirun ... torchrun ...` on the head node, over ssh, the way the seeds do it;
(b) `ansible-playbook launch.yml`;
(c) `torchfleet launch` (when the command has it).
Prints and writes medians and the ratios b/a and c/a to bench/results/launch_overhead.json.

The DDP job's own time varies by a second or more between runs here (six `import torch` on two
shared cores), which hides tenths of a second of launcher cost. So each round also starts a job
of almost no work the same three ways (bench/tiny_rank.py, one rank per node in rank mode, no
torch): the differences of those medians are the fixed costs of (b) and (c), and the report adds
the ratios they predict for the DDP job. And each round runs bench/floor.yml, a play that does
nothing on the controller, through ansible-playbook and through torchfleet's ansible-runner path:
no launch by (b) or (c) can cost less than the hand job plus that floor, so the report adds the
best ratios (b) and (c) could reach on this machine.

    python bench/launch_overhead.py -i inventory/local.yml --runs 9
    python bench/launch_overhead.py --runs 5 --before REV

Each round runs the jobs of almost no work and the floors --repeats times (3), the DDP job once:
their medians differ by tenths of a second, about what one run varies by here.

With --before REV, each round also starts the job of almost no work through launch.yml and
`torchfleet launch` of commit REV (a git worktree beside the checkout, sharing its fact cache and
inventory): the fixed cost before and after a change, side by side in one run.

Needs a cluster that setup.yml has prepared (facts in .cache/facts, run from the checkout's root).
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from benchlib import REPO, commit, run_timed  # bench/ is the script's directory, first on sys.path
SCRIPT_ARGS = ["--use-syn", "--epochs", "1", "--steps-per-epoch", "5", "--no-wandb", "--out-dir", "/tmp"]
# torchfleet's own ansible-runner path (torchfleet.ansible_calls.call, as `torchfleet launch` calls it) on a playbook.
FLOOR_RUNNER = ("import os, sys; from torchfleet.ansible_calls import Progress, call; "
                "sys.exit(call(playbook=os.path.abspath(sys.argv[1]), inventories=[sys.argv[2]], cmdline=[], "
                "progress=Progress(stream=open(os.devnull, 'w'))).rc)")


def inventory_nodes(path):
    data = yaml.safe_load(Path(path).read_text())
    group = data["all"]["children"]["cluster"]
    return group["hosts"], group.get("vars", {})


def hand_command(hosts, cluster_vars, nproc, tiny=False, rank_script="tiny_rank.py"):
    """What a user types on the head: a hostfile of addresses and one mpirun line (of the DDP
    job, or with `tiny` of one plain Python rank per node running `rank_script`)."""
    addresses = [h["ansible_host"] for h in hosts.values()]
    hostfile = "".join(f"{a} slots={nproc}\n" for a in addresses)
    if tiny:
        job = ("RANK=$OMPI_COMM_WORLD_RANK WORLD_SIZE=$OMPI_COMM_WORLD_SIZE "
               "exec /opt/torchfleet/envs/torchfleet/bin/python -u torchfleet/scripts/" + rank_script)
    else:
        job = ("/opt/torchfleet/envs/torchfleet/bin/torchrun --nnodes=%d --node-rank=$OMPI_COMM_WORLD_RANK "
               "--nproc-per-node=%d --rdzv-backend=static --rdzv-endpoint=%s:29500 --rdzv-id=hand "
               "torchfleet/scripts/train.py %s" % (len(addresses), nproc, addresses[0], " ".join(SCRIPT_ARGS)))
    line = ("printf %s > /tmp/hand-hostfile && mpirun -np %d --hostfile /tmp/hand-hostfile --map-by ppr:1:node "
            "--bind-to none --mca plm_rsh_no_tree_spawn 1 --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 "
            "-x NCCL_SOCKET_IFNAME=eth0 -x GLOO_SOCKET_IFNAME=eth0 -x PATH sh -c %s"
            % (shlex.quote(hostfile), len(addresses), shlex.quote(job)))
    head = next(iter(hosts.values()))["ansible_host"]
    ssh = ["ssh", "-i", cluster_vars["ansible_ssh_private_key_file"], *shlex.split(cluster_vars["ansible_ssh_common_args"]),
           f"{cluster_vars.get('ansible_user', 'root')}@{head}", "runuser", "-u", "torchfleet", "--", "sh", "-c",
           shlex.quote("cd && " + line)]
    return ssh


def worktree(rev: str) -> Path:
    """A checkout of `rev` that launches on the same cluster: its own code, this checkout's fact
    cache and local inventory (both git-ignored)."""
    path = Path(tempfile.gettempdir()) / f"tf-bench-{rev}"
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), rev], cwd=REPO, check=True,
                       capture_output=True)
    for shared in (".cache", "inventory/local.yml"):
        link = path / shared
        if not link.exists():
            link.symlink_to(REPO / shared)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default="inventory/local.yml")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "launch_overhead.json"))
    parser.add_argument("--before", metavar="REV", help="also time the launch of this commit, alternating")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each job of almost no work, and of each floor, in every round")
    args = parser.parse_args()

    hosts, cluster_vars = inventory_nodes(args.inventory)
    extra = ["-e", "script=examples/train.py", "-e", f"nproc_per_node={args.nproc}",
             "-e", json.dumps({"script_args": SCRIPT_ARGS})]
    ways = {
        "a_hand_mpirun": hand_command(hosts, cluster_vars, args.nproc),
        "b_launch_yml": ["ansible-playbook", "launch.yml", "-i", args.inventory, *extra],
    }
    tiny = ["-e", "launch_mode=rank", "-e", "nproc_per_node=1"]
    ways["a_tiny_hand_mpirun"] = hand_command(hosts, cluster_vars, 1, tiny=True)
    ways["b_tiny_launch_yml"] = ["ansible-playbook", "launch.yml", "-i", args.inventory,
                                 "-e", "script=bench/tiny_rank.py", *tiny]
    help_text = subprocess.run(["torchfleet", "--help"], capture_output=True, text=True, check=False).stdout
    if " launch" in help_text:
        ways["c_torchfleet_launch"] = ["torchfleet", "launch", "examples/train.py", "-i", args.inventory,
                                       "-e", f"nproc_per_node={args.nproc}", "--", *SCRIPT_ARGS]
        ways["c_tiny_torchfleet_launch"] = ["torchfleet", "launch", "bench/tiny_rank.py", "-i", args.inventory, *tiny]
    places = dict.fromkeys(ways, REPO)
    envs = {}
    if args.before:  # the same tiny launches from the earlier commit's checkout
        before = worktree(args.before)
        ways["b_tiny_launch_yml_before"], places["b_tiny_launch_yml_before"] = ways["b_tiny_launch_yml"], before
        if "c_tiny_torchfleet_launch" in ways:
            name = "c_tiny_torchfleet_launch_before"
            ways[name] = [sys.executable, "-m", "torchfleet", *ways["c_tiny_torchfleet_launch"][1:]]
            places[name], envs[name] = before, dict(os.environ, PYTHONPATH=str(before))
    ways["b_floor_playbook"] = ["ansible-playbook", "bench/floor.yml", "-i", args.inventory]
    ways["c_floor_runner"] = [sys.executable, "-c", FLOOR_RUNNER, "bench/floor.yml", args.inventory]
    # launch.yml copies the scripts; the hand runs use the copies, as a user would after one scp.
    run_timed(ways["b_launch_yml"])
    run_timed(ways["b_tiny_launch_yml"])
    seconds = {name: [] for name in ways}
    for round_ in range(args.runs):
        for name, argv in ways.items():  # alternate, so drift in machine load hits every way alike
            # The fixed costs are differences of a few tenths between runs that vary as much:
            # more samples of the short ways in each round, not of the DDP job.
            for _repeat in range(1 if "tiny" not in name and "floor" not in name else args.repeats):
                seconds[name].append(run_timed(argv, env=envs.get(name), cwd=places.get(name, REPO))[0])
                print(f"run {round_ + 1} {name}: {seconds[name][-1]:.2f} s", flush=True)
    medians = {name: round(statistics.median(values), 3) for name, values in seconds.items()}
    job = {name: value for name, value in medians.items() if "tiny" not in name and "floor" not in name}
    ratios = {f"{name[0]}/a": round(value / job["a_hand_mpirun"], 3) for name, value in job.items() if name[0] != "a"}
    # The launchers' own cost, from the job of almost no work, and the ratio it means for the DDP job.
    fixed = {f"{name[0]}": round(value - medians["a_tiny_hand_mpirun"], 3)
             for name, value in medians.items() if "tiny" in name and name[0] != "a" and "before" not in name}
    predicted = {f"{way}/a": round((job["a_hand_mpirun"] + cost) / job["a_hand_mpirun"], 3)
                 for way, cost in fixed.items()}
    # The best any launcher on ansible-playbook (b) or ansible-runner (c) could do: the job plus the floor.
    at_floor = {f"{name[0]}/a": round((job["a_hand_mpirun"] + value) / job["a_hand_mpirun"], 3)
                for name, value in medians.items() if "floor" in name}
    if args.before:  # after/before of each launcher's fixed cost, measured in the same rounds
        for name in ("b_tiny_launch_yml_before", "c_tiny_torchfleet_launch_before"):
            if name in medians:
                fixed[f"{name[0]}_before"] = round(medians[name] - medians["a_tiny_hand_mpirun"], 3)
    report = {"commit": commit(), "before": args.before, "nodes": len(hosts), "nproc_per_node": args.nproc, "runs": args.runs,
              "repeats": args.repeats,
              "seconds": seconds, "median_seconds": medians, "ratios": ratios,
              "fixed_cost_seconds": fixed, "ratios_from_fixed_cost": predicted, "ratios_at_floor": at_floor}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({key: report[key] for key in ("median_seconds", "ratios", "fixed_cost_seconds",
                                                   "ratios_from_fixed_cost", "ratios_at_floor")}, indent=2))


if __name__ == "__main__":
    main()
