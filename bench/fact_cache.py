"""Fact cache: ansible.builtin.jsonfile against torchfleet.cluster.json_facts, alternating, in one run.

Each round runs the same playbook twice on a set-up cluster, once with each cache plugin (each
with a directory of its own, filled by a first run that is not counted): setup.yml, which changes
nothing, and launch.yml of a one-step job. For each it records the wall time, the controller's
CPU (ansible-playbook, its forks and ssh: the children this script waited for) and the CPU of the
cluster's containers (the inventory's hosts), and prints medians and the ratios json_facts / jsonfile.

    python bench/fact_cache.py -i inventory/local.yml --rounds 3 [-e VAR=VALUE for setup.yml]

Writes bench/results/fact_cache.json. Needs a cluster setup.yml has prepared (run from the
checkout's root), on this machine's Docker for the containers' CPU.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

from benchlib import REPO, commit, inventory_hosts, run_timed, timed  # bench/ is the script's directory, first on sys.path

PLUGINS = {"jsonfile": "ansible.builtin.jsonfile", "json_facts": "torchfleet.cluster.json_facts"}
LAUNCH = ["-e", "script=examples/train.py", "-e", "nproc_per_node=1", "-e", json.dumps(
    {"script_args": ["--use-syn", "--epochs", "1", "--steps-per-epoch", "1", "--no-wandb", "--out-dir", "/tmp"]})]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default="inventory")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-e", "--setup-extra", action="append", default=[], help="an -e for setup.yml")
    args = parser.parse_args()
    extra = [a for e in args.setup_extra for a in ("-e", e)]
    caches = {name: tempfile.mkdtemp(prefix=f"torchfleet-bench-{name}-") for name in PLUGINS}
    envs = {name: dict(os.environ, ANSIBLE_CACHE_PLUGIN=plugin, ANSIBLE_CACHE_PLUGIN_CONNECTION=caches[name])
            for name, plugin in PLUGINS.items()}
    playbooks = {"setup": ["setup.yml", *extra], "launch": ["launch.yml", *LAUNCH]}
    containers = inventory_hosts(args.inventory)
    for name in PLUGINS:  # fills each cache; not counted
        run_timed(["ansible-playbook", "-i", args.inventory, *playbooks["setup"]], env=envs[name])
    figures = {(playbook, name): [] for playbook in playbooks for name in PLUGINS}
    for number in range(args.rounds):
        for playbook, argv in playbooks.items():
            for name in PLUGINS:
                figures[(playbook, name)].append(
                    timed(["ansible-playbook", "-i", args.inventory, *argv], envs[name], containers)[:3])
                print(f"round {number + 1} {playbook} {name}: wall, controller, containers {figures[(playbook, name)][-1]}",
                      file=sys.stderr)
    report = {"commit": commit(), "rounds": args.rounds, "inventory": args.inventory, "results": {}}
    for playbook in playbooks:
        medians = {name: [statistics.median(run[i] for run in figures[(playbook, name)]) for i in range(3)]
                   for name in PLUGINS}
        report["results"][playbook] = {
            name: dict(zip(("wall_s", "controller_cpu_s", "containers_cpu_s"), medians[name])) for name in PLUGINS}
        report["results"][playbook]["ratio_json_facts_to_jsonfile"] = {
            key: round(medians["json_facts"][i] / medians["jsonfile"][i], 3) if medians["jsonfile"][i] else None
            for i, key in enumerate(("wall", "controller_cpu", "containers_cpu"))}
    print(json.dumps(report, indent=2))
    (REPO / "bench" / "results" / "fact_cache.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
