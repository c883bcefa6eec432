"""A local cluster's life: its nodes started on a network of their own with one SSH key, the
inventory written for them with their host keys, a node put back as `up` left it, and all of it
removed by `down`."""

from __future__ import annotations

import json
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from torchfleet.collection import state_home
from torchfleet.devcluster.engine import ClusterError, docker, engine_answers, ensure_engine, log, run
from torchfleet.devcluster.images import IMAGE, ensure_image, ensure_slurm_image, image_exists

LABEL = "org.torchfleet.cluster"
DOMAIN = "torchfleet.test"
# A directory of the host that every node sees at this path, as a cluster's NFS or Lustre: what
# must be shared between nodes (a sharded checkpoint) goes there.
SHARED_MOUNT = "/shared"


@dataclass(frozen=True)
class Node:
    name: str  # container name and inventory name
    hostname: str  # short hostname inside the node
    address: str  # address on the cluster network


def state_dir(name: str) -> Path:
    return state_home() / name


def default_inventory_path(name: str) -> Path:
    return Path("inventory") / f"{name}.yml"


def containers(name: str) -> list[str]:
    out = docker("ps", "-a", "--filter", f"label={LABEL}={name}", "--format", "{{.Names}}").stdout
    return sorted(out.split())


def network(name: str) -> str:
    return f"tf-{name}"


def network_owner(name: str) -> str | None:
    """The cluster label on this cluster's network; None when there is no such network."""
    found = docker("network", "inspect", "--format", f'{{{{index .Labels "{LABEL}"}}}}', network(name),
                   check=False)
    return found.stdout.strip() if found.returncode == 0 else None


def ensure_network(name: str) -> None:
    net = network(name)
    owner = network_owner(name)
    if owner is not None:
        if owner != name:
            raise ClusterError(f"a Docker network named {net} exists and was not made by torchfleet; "
                               f"remove it or choose another cluster name with --name")
        return
    docker("network", "create", "--label", f"{LABEL}={name}", net)


def ensure_key(state: Path) -> str:
    key = state / "id_ed25519"
    if not key.exists():
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"torchfleet-{state.name}", "-f", str(key)])
    return (state / "id_ed25519.pub").read_text().strip()


def refuse_foreign_nodes(name: str, pubkey: str) -> None:
    """Nodes of this name started for another key (the state directory was removed, or another
    XDG_STATE_HOME holds the name) would refuse ours with "Permission denied": refuse before
    anything of theirs is changed."""
    for container in containers(name):
        env = docker("inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", container).stdout
        if f"TORCHFLEET_AUTHORIZED_KEY={pubkey}" not in env.splitlines():
            raise ClusterError(f"{container} exists but was started for another SSH key than {state_dir(name)} "
                               f"holds (its state directory was removed, or another XDG_STATE_HOME uses the "
                               f"name {name!r}); remove them with `torchfleet cluster down --name {name}`, or choose another "
                               f"name with --name")


def start_node(name: str, index: int, pubkey: str, image: str, shared: Path | None = None) -> None:
    container = f"tf-{name}-node{index}"
    hostname = f"node{index}"
    fqdn = f"{hostname}.{name}.{DOMAIN}"
    existing = docker("inspect", "--format", "{{.State.Running}} {{.Config.Image}}", container, check=False)
    if existing.returncode == 0:
        running, found_image = existing.stdout.split()
        if found_image == image and running == "true":
            return
        if found_image == image:
            docker("start", container)
            return
        docker("rm", "-f", container)
    docker(
        "run", "-d", "--name", container, "--hostname", hostname, "--domainname", f"{name}.{DOMAIN}",
        "--label", f"{LABEL}={name}", "--network", network(name),
        "--network-alias", hostname, "--network-alias", fqdn,
        "--cap-add", "NET_ADMIN", "--env", f"TORCHFLEET_AUTHORIZED_KEY={pubkey}",
        *(["--volume", f"{shared}:{SHARED_MOUNT}"] if shared else []),
        image,
    )


def restore_node(name: str, index: int) -> list[str]:
    """A node that a test or a benchmark took away (paused, stopped, killed, cut off its network)
    put back as `up` left it: running, on the cluster network under its names, with eth0 (the
    interface setup recorded). What was done, in words; [] when it was as it should be."""
    container, net = f"tf-{name}-node{index}", network(name)
    info = json.loads(docker("inspect", container).stdout)[0]
    done = []
    if info["State"]["Paused"]:
        docker("unpause", container)
        done.append(f"unpaused {container}")
    if not info["State"]["Running"]:
        docker("start", container)
        done.append(f"started {container}")
    if net not in info["NetworkSettings"]["Networks"]:
        # Docker hands back the lowest free address of a network made without a subnet: its own.
        docker("network", "connect", "--alias", f"node{index}", "--alias", f"node{index}.{name}.{DOMAIN}", net, container)
        done.append(f"reconnected {container}")
    # Reconnected, the node's interface is eth1, not the eth0 setup recorded: a restart makes it eth0.
    if docker("exec", container, "ip", "link", "show", "eth0", check=False).returncode != 0:
        docker("restart", "--time", "1", container)
        done.append(f"restarted {container}")
    return done


def node_facts(name: str, container: str) -> tuple[Node, list[str]]:
    """Address and host keys of a started node, read through Docker, not over the network."""
    net = network(name)
    info = json.loads(docker("inspect", container).stdout)[0]
    address = info["NetworkSettings"]["Networks"][net]["IPAddress"]
    node = Node(name=container, hostname=info["Config"]["Hostname"], address=address)
    keys: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = docker("exec", container, "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub", check=False)
        keys = [" ".join(line.split()[:2]) for line in found.stdout.splitlines() if line.strip()]
        if found.returncode == 0 and any(k.startswith("ssh-ed25519") for k in keys) and port_open(address, 22):
            return node, keys
        time.sleep(0.5)
    logs = docker("logs", "--tail", "20", container, check=False)
    raise ClusterError(f"{container} did not start sshd within 60s; its log:\n{logs.stdout}{logs.stderr}")


def port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def write_inventory(path: Path, name: str, nodes: list[tuple[Node, list[str]]], state: Path) -> None:
    known_hosts = state / "known_hosts"
    lines = []
    for node, keys in nodes:
        lines += [f"{node.name},{node.address} {key}" for key in keys]
    known_hosts.write_text("\n".join(lines) + "\n")
    hosts = "\n".join(f"        {n.name}:\n          ansible_host: {n.address}" for n, host_keys in nodes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"# Written by `torchfleet cluster up --name {name}`; removed by `torchfleet cluster down --name {name}`.\n"
        "# A local cluster of containers, used by the playbooks like any real cluster.\n"
        "all:\n  children:\n    cluster:\n      hosts:\n"
        f"{hosts}\n"
        "      vars:\n"
        "        ansible_user: root\n"
        f"        ansible_ssh_private_key_file: {state / 'id_ed25519'}\n"
        # Host keys were read through `docker exec`, so checking stays strict.
        f"        ansible_ssh_common_args: -o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes\n"
        f"        torchfleet_head: {nodes[0][0].name}\n"
    )


def up(name: str = "local", nodes: int = 3, inventory: Path | None = None, image: str | None = None,
       slurm: bool = False) -> Path:
    """Start the nodes; `image`: a node image of the user's own, derived from ours (the scale
    benchmark bakes Open MPI into one, as a site's golden image would); `slurm`: nodes with
    Debian's Slurm and munge installed, which setup's slurm role then configures and starts
    (setup.yml -e scheduler=slurm), as on machines of a site's own."""
    if nodes < 1:
        raise ClusterError(f"--nodes must be 1 or more, not {nodes}")
    inventory = inventory or default_inventory_path(name)
    ensure_engine()
    if slurm and image is not None:
        raise ClusterError("--slurm brings its own node image; give no image with it")
    if image is None:
        image = ensure_slurm_image() if slurm else ensure_image()
    elif not image_exists(image):
        raise ClusterError(f"no image {image}: build it first (from {IMAGE}, whose sshd start it needs)")
    ensure_network(name)
    state = state_dir(name)
    pubkey = ensure_key(state)
    refuse_foreign_nodes(name, pubkey)
    wanted = [f"tf-{name}-node{i}" for i in range(nodes)]
    for extra in set(containers(name)) - set(wanted):
        docker("rm", "-f", extra)
    shared = state / "shared"
    shared.mkdir(exist_ok=True)
    shared.chmod(0o1777)  # any account of the nodes writes there, as in /tmp
    for index in range(nodes):
        start_node(name, index, pubkey, image, shared)
    facts = [node_facts(name, container) for container in wanted]
    write_inventory(inventory, name, facts, state)
    (state / "inventory-path").write_text(str(inventory.resolve()))
    for node, host_keys in facts:
        log(f"{node.name}  {node.hostname}  {node.address}")
    log(f"inventory written to {inventory}")
    return inventory


def down(name: str = "local", inventory: Path | None = None) -> None:
    """Remove the containers, network, inventory and state that `up` made for this name, only."""
    recorded = state_dir(name) / "inventory-path"
    if inventory is None:
        inventory = Path(recorded.read_text()) if recorded.exists() else default_inventory_path(name)
    if engine_answers():
        for container in containers(name):
            docker("rm", "-f", container)
        if network_owner(name) == name:
            docker("network", "rm", network(name))
    if inventory.exists() and inventory.read_text().startswith("# Written by `torchfleet cluster up"):
        inventory.unlink()
    shutil.rmtree(state_dir(name), ignore_errors=True)


def status(name: str = "local") -> list[dict]:
    if not engine_answers():
        return []
    rows = []
    for container in containers(name):
        info = json.loads(docker("inspect", container).stdout)[0]
        nets = info["NetworkSettings"]["Networks"]
        rows.append({
            "name": container,
            "running": info["State"]["Running"],
            "address": nets.get(network(name), {}).get("IPAddress", ""),
        })
    return rows


def validate_name(name: str) -> str:
    # ASCII only: Docker's container and network names take no other letters.
    if not name or not all(c.isascii() and (c.isalnum() or c == "-") for c in name) or name.startswith("-"):
        raise ClusterError(f"cluster name {name!r} is not valid: use ASCII letters, digits and '-'")
    return name
