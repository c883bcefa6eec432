"""Scale: setup.yml and a launch of a tiny script at 4, 8, 16 and 32 nodes of light containers.

For each size, in one run: a fresh cluster of that many nodes (from a node image with Open MPI
baked in, as a site's golden image would have it, so apt downloads do not swamp the figures), a
cold `setup.yml` with the Python environment off (`python_env_engine=none`, `nccl_source=none`),
then a launch of bench/tiny_rank.py in rank mode (one MPI rank per node). Records wall times,
known_hosts lines per node, and the ratios of the 32-node times to the 4-node ones.

    python bench/scale.py                 # 4 8 16 32
    python bench/scale.py --sizes 4 8     # a quicker look

Writes bench/results/scale.json. Run from the checkout's root; uses its own fact cache, key and
cluster name (tfscale), and removes the cluster at the end.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

from benchlib import REPO, commit, timed  # bench/ is the script's directory, first on sys.path
sys.path.insert(0, str(REPO))
from torchfleet import devcluster  # noqa: E402

NAME = "tfscale"
SCALE_IMAGE = "torchfleet/node-openmpi:bookworm"
MARKER = "# BEGIN torchfleet"  # ssh_trust's managed block in /etc/ssh/ssh_known_hosts
APT_FRESH = 20 * 3600  # seconds; under the openmpi role's cache_valid_time (a day), with room for a run


def sh(argv, check=False, **kwargs):
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=check, **kwargs)


def bake_image():
    """The node image plus the Open MPI and venv packages setup would install, and python3-apt, which
    Ansible's apt module needs and would otherwise fetch on every node (apt-get update, a download,
    an install); host keys removed so every node still makes its own on first start. Baked again
    when older than APT_FRESH: the openmpi role's apt task runs apt-get update on every node once
    its package lists are a day old."""
    openmpi = yaml.safe_load((REPO / "roles/openmpi/vars/Debian.yml").read_text())["_openmpi_distribution_packages"]
    venv = yaml.safe_load((REPO / "roles/python_env/vars/Debian.yml").read_text())["_python_env_venv_packages"]
    packages = [*openmpi, *venv, "python3-apt"]
    base = devcluster.ensure_image()
    label = f"{base} + {' '.join(packages)}"
    found = sh(["docker", "image", "inspect", "--format",
                '{{index .Config.Labels "org.torchfleet.bake"}} {{.Created}}', SCALE_IMAGE])
    if found.returncode == 0:
        found_label, space, created = found.stdout.strip().rpartition(" ")
        age = time.time() - datetime.fromisoformat(re.sub(r"(\.\d{6})\d*", r"\1", created)).timestamp()
        if found_label == label and age < APT_FRESH:
            return
    baker = "tf-scale-bake"
    sh(["docker", "rm", "-f", baker])
    sh(["docker", "run", "-d", "--name", baker, "--cap-add", "NET_ADMIN", base], check=True)  # node-init makes a docker0
    try:
        install = sh(["docker", "exec", "-e", "DEBIAN_FRONTEND=noninteractive", baker, "sh", "-c",
                      "apt-get update -qq && apt-get install -y -qq " + " ".join(packages)
                      + " && rm -f /etc/ssh/ssh_host_*"])
        if install.returncode != 0:
            sys.exit(f"could not install {packages} in the image:\n{install.stdout[-2000:]}{install.stderr[-2000:]}")
        sh(["docker", "commit", "--change", f"LABEL org.torchfleet.bake={json.dumps(label)}", baker, SCALE_IMAGE], check=True)
    finally:
        sh(["docker", "rm", "-f", baker])


def known_hosts_lines(container):
    """Lines in torchfleet's managed block of the node's /etc/ssh/ssh_known_hosts."""
    text = sh(["docker", "exec", container, "cat", "/etc/ssh/ssh_known_hosts"]).stdout
    block, inside = 0, False
    for line in text.splitlines():
        if line.startswith(MARKER):
            inside = True
        elif line.startswith("# END torchfleet"):
            inside = False
        elif inside and line.strip():
            block += 1
    return block


def measure(size, work):
    env = dict(os.environ, XDG_STATE_HOME=str(work / "state"), ANSIBLE_CACHE_PLUGIN_CONNECTION=str(work / "facts"))
    inventory = work / "inventory.yml"
    started = time.monotonic()
    devcluster.up(name=NAME, nodes=size, inventory=inventory, image=SCALE_IMAGE)
    containers_up = round(time.monotonic() - started, 3)
    key = ["-e", f"ssh_trust_key_file={work / 'keys' / 'cluster_ed25519'}"]
    containers = [f"tf-{NAME}-node{i}" for i in range(size)]
    setup, setup_controller, setup_nodes = timed(
        ["ansible-playbook", "setup.yml", "-i", str(inventory), *key,
         "-e", "python_env_engine=none", "-e", "nccl_source=none"], env, containers)[:3]
    launch, launch_controller, launch_nodes, result = timed(
        ["ansible-playbook", "launch.yml", "-i", str(inventory), "-e", "script=bench/tiny_rank.py",
         "-e", "launch_mode=rank", "-e", "nproc_per_node=1", "-v"], env, containers)
    # The module's result (shown with -v) has the world size of the run.
    world = [int(w) for w in re.findall(r'"world_size": (\d+)', result.stdout)]
    lines = [known_hosts_lines(f"tf-{NAME}-node{i}") for i in (0, size - 1)]
    return {"nodes": size, "containers_up_s": containers_up, "setup_s": setup, "launch_s": launch,
            # Here every node shares this machine's cores: CPU time shows what a real cluster,
            # where each node has its own, would take off the controller.
            "setup_cpu_controller_s": setup_controller, "setup_cpu_nodes_s": setup_nodes,
            "launch_cpu_controller_s": launch_controller, "launch_cpu_nodes_s": launch_nodes,
            "world_size_seen": world[0] if world else None, "known_hosts_lines_node0": lines[0],
            "known_hosts_lines_last_node": lines[1]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "scale.json"))
    args = parser.parse_args()
    bake_image()
    rows = []
    try:
        for size in args.sizes:
            devcluster.down(NAME)  # every size starts cold
            with tempfile.TemporaryDirectory(prefix="tfscale-") as work:
                rows.append(measure(size, Path(work)))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        devcluster.down(NAME)
    first, last = rows[0], rows[-1]
    ratios = {f"setup {last['nodes']}/{first['nodes']}": round(last["setup_s"] / first["setup_s"], 3),
              f"launch {last['nodes']}/{first['nodes']}": round(last["launch_s"] / first["launch_s"], 3)}
    report = {"commit": commit(), "image": SCALE_IMAGE, "host_cpus": os.cpu_count(), "rows": rows, "ratios": ratios}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(ratios, indent=2))


if __name__ == "__main__":
    main()
