"""One local cluster of three containers, set up once, shared by the tests that need a ready cluster."""

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from torchfleet import devcluster
from torchfleet.devcluster.cluster import node_facts, start_node, write_inventory
from torchfleet.devcluster.engine import docker
from torchfleet.devcluster.images import image_exists

REPO = Path(__file__).resolve().parents[2]
# A name per test session: two sessions side by side (or one beside a CI run on the same Docker)
# each get their own containers, never the other's, whose key is not theirs.
# Under pytest-xdist each worker is a process of its own, with a cluster of its own.
NAME = (os.environ["TORCHFLEET_TEST_CLUSTER"] + os.environ.get("PYTEST_XDIST_WORKER", "")
        if os.environ.get("TORCHFLEET_TEST_CLUSTER") else f"tfit{os.getpid()}")
NODES = [f"tf-{NAME}-node{i}" for i in range(3)]
# torchft for the launches with --fault-tolerance torchft: named in the spec, so that every setup a
# test runs on the session's cluster keeps it, whatever its -e (setup.yml adds the same pin for
# -e fault_tolerance=torchft, which the session's own setups pass as a user would).
TEST_PACKAGES = ["torch==2.13.0", "numpy", "tqdm", "torchft==0.2.0"]
# The set-up nodes of a session's first cluster, committed for its other workers' clusters.
SNAPSHOT = "torchfleet/test-set-up"


def run(argv, check=False, **kwargs):
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=check, **kwargs)


def training_result(output):
    """Rank 0's TORCHFLEET_RESULT as a dict, from any output that carries it: a run's raw or
    tagged lines (Open MPI's, Hydra's), or a playbook's, where the line sits JSON-escaped in a
    task result. The last one where several are shown; whatever follows the JSON is left."""
    unescaped = output.replace('\\"', '"')
    assert "TORCHFLEET_RESULT " in unescaped, output[-3000:]
    return json.JSONDecoder().raw_decode(unescaped.rsplit("TORCHFLEET_RESULT ", 1)[1])[0]


def recap(output):
    """{host: {ok: N, changed: N, unreachable: N, failed: N}} from a PLAY RECAP."""
    found = {}
    for host, fields in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M):
        found[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", fields)}
    return found


class Cluster:
    """`torchfleet cluster up --slurm`, then setup.yml; facts, keys and state kept in a directory of its own.

    Under pytest-xdist, `shared` is a directory every worker of the session sees: the first
    worker to need a cluster sets one up from scratch and commits its nodes as images; the
    others start their nodes from those images and run setup again on them, which only converges
    (the wheels, the venv and Slurm are in place; docs/performance.md has the figures). Each
    cluster still has nodes, names, addresses and keys of its own."""

    def __init__(self, tmp, shared=None):
        self.env = dict(os.environ, XDG_STATE_HOME=str(tmp / "state"),
                        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp / "facts"))
        self.inventory = tmp / "inventory.yml"
        self.key = tmp / "keys" / "cluster_ed25519"
        self.shared = shared

    def torchfleet(self, *args):
        return run([sys.executable, "-m", "torchfleet", *args], env=self.env, timeout=900)

    def playbook(self, name, *extra, timeout=1800):
        argv = ["ansible-playbook", name, "-i", str(self.inventory), "-e", f"ssh_trust_key_file={self.key}", *extra]
        result = run(argv, env=self.env, timeout=timeout)
        return result.returncode, result.stdout + result.stderr

    def popen_playbook(self, name, *extra):
        argv = ["ansible-playbook", name, "-i", str(self.inventory), *extra]
        return subprocess.Popen(argv, cwd=REPO, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def setup(self, *extra):
        return self.playbook("setup.yml", *extra)

    def launch(self, *extra, timeout=900):
        return self.playbook("launch.yml", *extra, timeout=timeout)

    def up(self):
        # Containers of this name left by a session that was killed (its key is gone with it).
        self.torchfleet("cluster", "down", "--name", NAME)
        # Nodes with Slurm's packages, which setup's slurm role configures and starts (-e
        # scheduler=slurm below): the ssh tests see nodes as any cluster's, and the Slurm tests share
        # the same nodes and their one setup instead of a cluster of their own.
        result = self.torchfleet("cluster", "up", "--slurm", "--name", NAME, "--nodes", "3",
                                 "--inventory", str(self.inventory))
        assert result.returncode == 0, result.stderr
        if self.shared is None:
            self.set_up_from_scratch()
            return
        with open(self.shared / "set-up.lock", "w", encoding="utf-8") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
            record = self.shared / "set-up.json"
            snapshot = json.loads(record.read_text()) if record.exists() else None
            if snapshot and all(image_exists(image) for image in snapshot["images"]):
                self.set_up_from(snapshot)
            else:
                self.set_up_from_scratch()
                record.write_text(json.dumps(self.commit()))

    def add_test_settings(self):
        with open(self.inventory, "a", encoding="utf-8") as inventory:
            # The spec the tests' scripts need: tqdm draws the progress bars test_run_output follows.
            inventory.write(f"        python_env_packages: {json.dumps(TEST_PACKAGES)}\n")
            # Open MPI's runtime only: the default adds libopenmpi-dev, whose compilers (gcc,
            # gfortran: 128 packages, not 31) no test uses; Molecule's scenario installs the default.
            inventory.write("        openmpi_packages: [openmpi-bin]\n")
            # Launches go over ssh unless a test asks for Slurm (--scheduler slurm), though setup
            # sets Slurm up, where a launch would otherwise submit through it.
            inventory.write("        scheduler: none\n")

    def set_up_from_scratch(self):
        self.add_test_settings()
        # The first setup, from scratch: what the controller sends into the cluster's network
        # (the wheels once, ssh, Ansible's modules), for test_setup_cluster to judge.
        with devcluster.ControllerTraffic(NAME) as traffic:
            rc, output = self.setup("-e", "scheduler=slurm", "-e", "fault_tolerance=torchft")
            self.first_setup_sent = traffic.sent()
        assert rc == 0, output[-3000:]

    def commit(self):
        """The set-up nodes as images, and what another worker's cluster needs besides them."""
        tag = f"{SNAPSHOT}:{os.environ.get('PYTEST_XDIST_TESTRUNUID', NAME)[:12]}"

        def committed(index):
            image = f"{tag}-node{index}"
            docker("commit", NODES[index], image)
            return image
        with ThreadPoolExecutor(len(NODES)) as pool:
            images = list(pool.map(committed, range(len(NODES))))
        return {"images": images, "key": str(self.key), "first_setup_sent": self.first_setup_sent}

    def set_up_from(self, snapshot):
        """This worker's nodes from the committed images, under their own names and addresses,
        then setup again: it rewrites what names the nodes (known_hosts, the facts it records)."""
        # Where `cluster up` above kept this cluster's key, in this cluster's XDG_STATE_HOME.
        state = Path(self.env["XDG_STATE_HOME"]) / "torchfleet" / NAME
        pubkey = (state / "id_ed25519.pub").read_text().strip()
        for index, image in enumerate(snapshot["images"]):
            start_node(NAME, index, pubkey, image, state / "shared")
        # Their host keys are the first cluster's nodes': read again, as `cluster up` read them.
        write_inventory(self.inventory, NAME, [node_facts(NAME, node) for node in NODES], state)
        self.add_test_settings()
        # The cluster key the nodes already trust (setup would otherwise make another).
        self.key.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", ".pub"):
            shutil.copy(snapshot["key"] + suffix, str(self.key) + suffix)  # with its mode: 0600 for the key
        self.first_setup_sent = snapshot["first_setup_sent"]
        rc, output = self.setup("-e", "scheduler=slurm", "-e", "fault_tolerance=torchft")
        assert rc == 0, output[-3000:]

    def down(self):
        self.torchfleet("cluster", "down", "--name", NAME)
        if self.shared is not None and (self.shared / "set-up.json").exists():
            # The last cluster started from them lets them go; while another runs, they stay.
            for image in json.loads((self.shared / "set-up.json").read_text())["images"]:
                docker("rmi", image, check=False)
