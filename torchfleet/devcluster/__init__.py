"""A local cluster of containers that stands in for a handful of GPU machines: a tool for trying
torchfleet and for its tests, apart from the product (`torchfleet cluster up/down/image/status`).
The node images are built from node/ beside this file.

Every node runs a real sshd with its own host keys, sits on one user-defined Docker network and
carries a `docker0` bridge with the same address as every other node (the trap real Docker hosts
set for NCCL). `up` writes an Ansible inventory for the nodes that the playbooks use exactly as
they would use a real cluster's, with host key checking on.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from torchfleet.collection import state_home

IMAGE = "torchfleet/node:bookworm"
BASE_IMAGE = "torchfleet/node-base:bookworm"
PULL_BASE = "debian:bookworm"
NODE_PACKAGES = ("python3", "openssh-server", "iproute2", "sudo")
SLURM_IMAGE = "torchfleet/node-slurm:bookworm"
SLURM_PACKAGES = ("slurmd", "slurmctld", "slurm-client", "munge")
# The one partition of a local Slurm cluster, holding every node (the default partition).
LABEL = "org.torchfleet.cluster"
RECIPE_LABEL = "org.torchfleet.recipe"
DOMAIN = "torchfleet.test"
# A directory of the host that every node sees at this path, as a cluster's NFS or Lustre: what
# must be shared between nodes (a sharded checkpoint) goes there.
SHARED_MOUNT = "/shared"
DOCKERD_LOG = Path("/var/log/torchfleet-dockerd.log")


class ClusterError(Exception):
    """A problem the user can act on; the message says what and how."""


@dataclass(frozen=True)
class Node:
    name: str  # container name and inventory name
    hostname: str  # short hostname inside the node
    address: str  # address on the cluster network


def log(message: str) -> None:
    print(f"torchfleet: {message}", file=sys.stderr, flush=True)


def run(argv: list[str], *, check: bool = True, capture: bool = True, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, text=True, capture_output=capture, check=False, **kwargs)
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip() if capture else ""
        raise ClusterError(f"`{' '.join(argv)}` failed (exit {result.returncode}): {detail}")
    return result


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run(["docker", *args], check=check)


# --- the engine -------------------------------------------------------------------------------


def _engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return run(["docker", "info", "--format", "{{.ServerVersion}}"], check=False).returncode == 0


def _debian_like() -> bool:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return False
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    ids = {fields.get("ID", "").strip('"')} | set(fields.get("ID_LIKE", "").strip('"').split())
    return bool(ids & {"debian", "ubuntu"})


def ensure_engine(wait_seconds: int = 90) -> None:
    """Use a running Docker engine; as root on Debian/Ubuntu, install and start one if needed."""
    if _engine_answers():
        return
    if os.geteuid() != 0 or not _debian_like():
        raise ClusterError(
            "no Docker engine answers. Install Docker (Debian/Ubuntu: `apt-get install docker.io`), "
            "start it (`systemctl start docker`) and make sure `docker info` works for this user."
        )
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        log("installing docker.io from the distribution's archive")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        run(["apt-get", "update", "-qq"], env=env)
        run(["apt-get", "install", "-y", "-qq", "docker.io"], env=env)
    log(f"starting dockerd in the background (log: {DOCKERD_LOG})")
    with open(DOCKERD_LOG, "ab") as out:
        subprocess.Popen(["dockerd"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        if _engine_answers():
            return
        time.sleep(1)
    raise ClusterError(f"dockerd did not answer within {wait_seconds}s; see {DOCKERD_LOG}")


# --- the node image ---------------------------------------------------------------------------


def _recipe_files(names=("Dockerfile", "node-init")) -> dict[str, bytes]:
    node = resources.files(__name__) / "node"
    return {name: (node / name).read_bytes() for name in names}


def recipe_digest(names=("Dockerfile", "node-init"), packages=NODE_PACKAGES) -> str:
    digest = hashlib.sha256()
    for name, data in sorted(_recipe_files(names).items()):
        digest.update(name.encode() + b"\0" + data + b"\0")
    digest.update(" ".join(packages).encode())
    return digest.hexdigest()[:16]


def _image_exists(image: str) -> bool:
    return docker("image", "inspect", image, check=False).returncode == 0


def _image_label(image: str, label: str) -> str | None:
    result = docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{label}"}}}}', image, check=False)
    return result.stdout.strip() if result.returncode == 0 else None


def _debootstrap_base(mirror: str) -> None:
    if os.geteuid() != 0:
        raise ClusterError(
            f"no registry answers for `docker pull {PULL_BASE}` and building the node image from "
            "debootstrap needs root: run `torchfleet cluster up` as root once, or load a Debian 12 image "
            f"as {PULL_BASE}."
        )
    if shutil.which("debootstrap") is None:
        log("installing debootstrap")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        run(["apt-get", "install", "-y", "-qq", "debootstrap"], env=env)
    with tempfile.TemporaryDirectory(prefix="torchfleet-rootfs-") as root:
        log(f"no registry answers: building a Debian 12 root with debootstrap from {mirror}")
        run([
            "debootstrap", "--variant=minbase", "--include=" + ",".join(NODE_PACKAGES),
            "bookworm", root, mirror,
        ])
        shutil.rmtree(Path(root, "var/cache/apt/archives"), ignore_errors=True)
        shutil.rmtree(Path(root, "var/lib/apt/lists"), ignore_errors=True)
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        run(["docker", "import", "-", BASE_IMAGE], stdin=tar.stdout)
        if tar.wait() != 0:
            raise ClusterError("packing the debootstrap root with tar failed")


def ensure_image(rebuild: bool = False) -> str:
    """Build the node image unless one made from the same recipe is already there."""
    digest = recipe_digest()
    if not rebuild and _image_label(IMAGE, RECIPE_LABEL) == digest:
        return IMAGE
    if docker("pull", "-q", PULL_BASE, check=False).returncode == 0:
        base = PULL_BASE
    else:
        if rebuild or not _image_exists(BASE_IMAGE):
            _debootstrap_base(os.environ.get("TORCHFLEET_DEBIAN_MIRROR", "http://deb.debian.org/debian"))
        base = BASE_IMAGE
    log(f"building {IMAGE} from {base}")
    with tempfile.TemporaryDirectory(prefix="torchfleet-image-") as context:
        for name, data in _recipe_files().items():
            Path(context, name).write_bytes(data)
        Path(context, "node-init").chmod(0o755)
        # The classic builder works against every engine version, BuildKit or not.
        run(
            ["docker", "build", "-q", "--build-arg", f"BASE={base}",
             "--build-arg", f"PACKAGES={' '.join(NODE_PACKAGES)}", "--label", f"{RECIPE_LABEL}={digest}",
             "-t", IMAGE, context],
            env=dict(os.environ, DOCKER_BUILDKIT="0"),
        )
    return IMAGE


SLURM_RECIPE = ("Dockerfile.slurm", "slurm-init")


def ensure_slurm_image(rebuild: bool = False) -> str:
    """The Slurm node image, built on the node image unless one from the same recipes is there."""
    base = ensure_image(rebuild)
    digest = recipe_digest(SLURM_RECIPE, SLURM_PACKAGES) + "-" + recipe_digest()
    if not rebuild and _image_label(SLURM_IMAGE, RECIPE_LABEL) == digest:
        return SLURM_IMAGE
    log(f"building {SLURM_IMAGE} from {base} (Debian's slurm-wlm and munge)")
    with tempfile.TemporaryDirectory(prefix="torchfleet-image-") as context:
        for name, data in _recipe_files(SLURM_RECIPE).items():
            Path(context, name).write_bytes(data)
        Path(context, "slurm-init").chmod(0o755)
        run(["docker", "build", "-q", "-f", str(Path(context, "Dockerfile.slurm")), "--build-arg", f"BASE={base}",
             "--build-arg", f"PACKAGES={' '.join(SLURM_PACKAGES)}", "--label", f"{RECIPE_LABEL}={digest}",
             "-t", SLURM_IMAGE, context],
            env=dict(os.environ, DOCKER_BUILDKIT="0"))
    return SLURM_IMAGE


# --- the cluster ------------------------------------------------------------------------------


def state_dir(name: str) -> Path:
    return state_home() / name


def default_inventory_path(name: str) -> Path:
    return Path("inventory") / f"{name}.yml"


def _containers(name: str) -> list[str]:
    out = docker("ps", "-a", "--filter", f"label={LABEL}={name}", "--format", "{{.Names}}").stdout
    return sorted(out.split())


def _network(name: str) -> str:
    return f"tf-{name}"


def _network_owner(name: str) -> str | None:
    """The cluster label on this cluster's network; None when there is no such network."""
    found = docker("network", "inspect", "--format", f'{{{{index .Labels "{LABEL}"}}}}', _network(name),
                   check=False)
    return found.stdout.strip() if found.returncode == 0 else None


def _ensure_network(name: str) -> None:
    net = _network(name)
    owner = _network_owner(name)
    if owner is not None:
        if owner != name:
            raise ClusterError(f"a Docker network named {net} exists and was not made by torchfleet; "
                               f"remove it or choose another cluster name with --name")
        return
    docker("network", "create", "--label", f"{LABEL}={name}", net)


def _ensure_key(state: Path) -> str:
    key = state / "id_ed25519"
    if not key.exists():
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"torchfleet-{state.name}", "-f", str(key)])
    return (state / "id_ed25519.pub").read_text().strip()


def _refuse_foreign_nodes(name: str, pubkey: str) -> None:
    """Nodes of this name started for another key (the state directory was removed, or another
    XDG_STATE_HOME holds the name) would refuse ours with "Permission denied": refuse before
    anything of theirs is changed."""
    for container in _containers(name):
        env = docker("inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", container).stdout
        if f"TORCHFLEET_AUTHORIZED_KEY={pubkey}" not in env.splitlines():
            raise ClusterError(f"{container} exists but was started for another SSH key than {state_dir(name)} "
                               f"holds (its state directory was removed, or another XDG_STATE_HOME uses the "
                               f"name {name!r}); remove them with `torchfleet cluster down --name {name}`, or choose another "
                               f"name with --name")


def _start_node(name: str, index: int, pubkey: str, image: str, shared: Path | None = None) -> None:
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
        "--label", f"{LABEL}={name}", "--network", _network(name),
        "--network-alias", hostname, "--network-alias", fqdn,
        "--cap-add", "NET_ADMIN", "--env", f"TORCHFLEET_AUTHORIZED_KEY={pubkey}",
        *(["--volume", f"{shared}:{SHARED_MOUNT}"] if shared else []),
        image,
    )


def restore_node(name: str, index: int) -> list[str]:
    """A node that a test or a benchmark took away (paused, stopped, killed, cut off its network)
    put back as `up` left it: running, on the cluster network under its names, with eth0 (the
    interface setup recorded). What was done, in words; [] when it was as it should be."""
    container, net = f"tf-{name}-node{index}", _network(name)
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


def _node_facts(name: str, container: str) -> tuple[Node, list[str]]:
    """Address and host keys of a started node, read through Docker, not over the network."""
    net = _network(name)
    info = json.loads(docker("inspect", container).stdout)[0]
    address = info["NetworkSettings"]["Networks"][net]["IPAddress"]
    node = Node(name=container, hostname=info["Config"]["Hostname"], address=address)
    keys: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = docker("exec", container, "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub", check=False)
        keys = [" ".join(line.split()[:2]) for line in found.stdout.splitlines() if line.strip()]
        if found.returncode == 0 and any(k.startswith("ssh-ed25519") for k in keys) and _port_open(address, 22):
            return node, keys
        time.sleep(0.5)
    logs = docker("logs", "--tail", "20", container, check=False)
    raise ClusterError(f"{container} did not start sshd within 60s; its log:\n{logs.stdout}{logs.stderr}")


def _port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def _write_inventory(path: Path, name: str, nodes: list[tuple[Node, list[str]]], state: Path) -> None:
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
    elif not _image_exists(image):
        raise ClusterError(f"no image {image}: build it first (from {IMAGE}, whose sshd start it needs)")
    _ensure_network(name)
    state = state_dir(name)
    pubkey = _ensure_key(state)
    _refuse_foreign_nodes(name, pubkey)
    wanted = [f"tf-{name}-node{i}" for i in range(nodes)]
    for extra in set(_containers(name)) - set(wanted):
        docker("rm", "-f", extra)
    shared = state / "shared"
    shared.mkdir(exist_ok=True)
    shared.chmod(0o1777)  # any account of the nodes writes there, as in /tmp
    for index in range(nodes):
        _start_node(name, index, pubkey, image, shared)
    facts = [_node_facts(name, container) for container in wanted]
    _write_inventory(inventory, name, facts, state)
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
    if _engine_answers():
        for container in _containers(name):
            docker("rm", "-f", container)
        if _network_owner(name) == name:
            docker("network", "rm", _network(name))
    if inventory.exists() and inventory.read_text().startswith("# Written by `torchfleet cluster up"):
        inventory.unlink()
    shutil.rmtree(state_dir(name), ignore_errors=True)


def status(name: str = "local") -> list[dict]:
    if not _engine_answers():
        return []
    rows = []
    for container in _containers(name):
        info = json.loads(docker("inspect", container).stdout)[0]
        nets = info["NetworkSettings"]["Networks"]
        rows.append({
            "name": container,
            "running": info["State"]["Running"],
            "address": nets.get(_network(name), {}).get("IPAddress", ""),
        })
    return rows


def validate_name(name: str) -> str:
    if not name or not all(c.isalnum() or c == "-" for c in name) or name.startswith("-"):
        raise ClusterError(f"cluster name {name!r} is not valid: use letters, digits and '-'")
    return name


class ControllerTraffic:
    """Bytes this machine (the controller) sends into cluster `name`'s network, counted by an
    iptables rule in OUTPUT with no target (it counts and lets every packet on), so traffic
    between the nodes, which never leaves the bridge through this machine's own stack, and
    traffic routed for the nodes to the outside (apt), which goes through FORWARD, are not
    counted. Needs root and iptables; a context manager that removes its rule."""

    def __init__(self, name: str):
        subnet = docker("network", "inspect", "--format", "{{range .IPAM.Config}}{{.Subnet}} {{end}}",
                        _network(name)).stdout.split()
        self.spec = ["OUTPUT", "-d", next(s for s in subnet if ":" not in s),
                     "-m", "comment", "--comment", f"torchfleet-traffic-{name}-{os.getpid()}"]

    def __enter__(self) -> "ControllerTraffic":
        run(["iptables", "-I", *self.spec])
        return self

    def __exit__(self, *exc) -> None:
        run(["iptables", "-D", *self.spec], check=False)

    def sent(self) -> int:
        """Bytes sent since the rule was made (or last zeroed)."""
        listing = run(["iptables", "-L", "OUTPUT", "-v", "-x", "-n"]).stdout
        comment = self.spec[-1]
        return sum(int(line.split()[1]) for line in listing.splitlines() if f"/* {comment} */" in line)


def received_bytes(containers: list[str]) -> dict[str, int]:
    """Bytes each node's eth0 has received since it started (the kernel's counter)."""
    return {c: int(docker("exec", c, "cat", "/sys/class/net/eth0/statistics/rx_bytes").stdout) for c in containers}
