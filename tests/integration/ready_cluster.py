"""One local cluster of three containers, set up once, shared by the tests that need a ready cluster."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from torchfleet import devcluster

REPO = Path(__file__).resolve().parents[2]
# A name per test session: two sessions side by side (or one beside a CI run on the same Docker)
# each get their own containers, never the other's, whose key is not theirs.
# Under pytest-xdist each worker is a process of its own, with a cluster of its own.
NAME = (os.environ["TORCHFLEET_TEST_CLUSTER"] + os.environ.get("PYTEST_XDIST_WORKER", "")
        if os.environ.get("TORCHFLEET_TEST_CLUSTER") else f"tfit{os.getpid()}")
NODES = [f"tf-{NAME}-node{i}" for i in range(3)]
TEST_PACKAGES = ["torch==2.13.0", "numpy", "tqdm"]


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
    """`torchfleet cluster up --slurm`, then setup.yml; facts, keys and state kept in a directory of its own."""

    def __init__(self, tmp):
        self.env = dict(os.environ, XDG_STATE_HOME=str(tmp / "state"),
                        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp / "facts"))
        self.inventory = tmp / "inventory.yml"
        self.key = tmp / "keys" / "cluster_ed25519"

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
        # The spec the tests' scripts need: tqdm draws the progress bars test_run_output follows.
        with open(self.inventory, "a", encoding="utf-8") as inventory:
            inventory.write(f"        python_env_packages: {json.dumps(TEST_PACKAGES)}\n")
            # Launches go over ssh unless a test asks for Slurm (--scheduler slurm), though setup
            # sets Slurm up, where a launch would otherwise submit through it.
            inventory.write("        scheduler: none\n")
        # The first setup, from scratch: what the controller sends into the cluster's network
        # (the wheels once, ssh, Ansible's modules), for test_setup_cluster to judge.
        with devcluster.ControllerTraffic(NAME) as traffic:
            rc, output = self.setup("-e", "scheduler=slurm")
            self.first_setup_sent = traffic.sent()
        assert rc == 0, output[-3000:]

    def down(self):
        self.torchfleet("cluster", "down", "--name", NAME)
