"""`torchfleet cluster up|down` against the real Docker engine: real containers, real sshd."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NAME = f"tftest{os.getpid()}"  # its own per session, like ready_cluster's
pytestmark = pytest.mark.cluster


def torchfleet(*args, env):
    return subprocess.run([sys.executable, "-m", "torchfleet", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900, check=False)


def docker(*args):
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two nodes under a cluster name of the tests' own, with state kept out of the user's home."""
    tmp = tmp_path_factory.mktemp("cluster")
    env = dict(os.environ, XDG_STATE_HOME=str(tmp / "state"))
    inventory = tmp / "inventory" / f"{NAME}.yml"
    up = torchfleet("cluster", "up", "--name", NAME, "--nodes", "2", "--inventory", str(inventory), env=env)
    assert up.returncode == 0, up.stderr
    yield {"env": env, "inventory": inventory, "tmp": tmp, "up": up}
    torchfleet("cluster", "down", "--name", NAME, env=env)


def containers():
    out = docker("ps", "-a", "--filter", f"label=org.torchfleet.cluster={NAME}", "--format", "{{.Names}} {{.ID}}")
    return dict(line.split() for line in out.stdout.splitlines())


def test_up_starts_nodes_with_sshd_and_a_docker0_look_alike(cluster):
    assert sorted(containers()) == [f"tf-{NAME}-node0", f"tf-{NAME}-node1"]
    for index in (0, 1):
        node = f"tf-{NAME}-node{index}"
        assert docker("exec", node, "hostname").stdout.strip() == f"node{index}"
        docker0 = docker("exec", node, "ip", "-4", "-o", "addr", "show", "dev", "docker0").stdout
        assert "172.17.0.1/16" in docker0
        assert "state UP" in docker("exec", node, "ip", "link", "show", "docker0").stdout


def test_every_node_has_host_keys_of_its_own(cluster):
    keys = {docker("exec", f"tf-{NAME}-node{i}", "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1]
            for i in (0, 1)}
    assert len(keys) == 2


def test_inventory_reaches_every_node_over_ssh_with_strict_host_keys(cluster):
    text = cluster["inventory"].read_text()
    assert "StrictHostKeyChecking=yes" in text and f"torchfleet_head: tf-{NAME}-node0" in text
    result = subprocess.run(
        ["ansible", "cluster", "-i", str(cluster["inventory"]), "-m", "ansible.builtin.command",
         "-a", "cat /etc/hostname", "--one-line"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        env=dict(cluster["env"], ANSIBLE_HOST_KEY_CHECKING="True"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"tf-{NAME}-node0 | CHANGED | rc=0 | (stdout) node0" in result.stdout
    assert f"tf-{NAME}-node1 | CHANGED | rc=0 | (stdout) node1" in result.stdout


def test_a_changed_host_key_is_refused(cluster):
    """The known_hosts written by `up` is what keeps the connection safe: a stranger is refused."""
    state = Path(cluster["env"]["XDG_STATE_HOME"]) / "torchfleet" / NAME
    forged = cluster["tmp"] / "forged_known_hosts"
    lines = (state / "known_hosts").read_text().splitlines()
    other = {line.split()[1]: line.split()[2] for line in lines if line.startswith(f"tf-{NAME}-node1")}
    forged.write_text("".join(f"{line.split()[0]} {line.split()[1]} {other[line.split()[1]]}\n"
                              for line in lines if line.startswith(f"tf-{NAME}-node0")))
    address = json.loads(docker("inspect", f"tf-{NAME}-node0").stdout)[0]["NetworkSettings"]["Networks"][
        f"tf-{NAME}"]["IPAddress"]
    result = subprocess.run(
        ["ssh", "-i", str(state / "id_ed25519"), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
         "-o", f"UserKnownHostsFile={forged}", f"root@{address}", "true"],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert "HOST IDENTIFICATION HAS CHANGED" in result.stderr or "Host key verification failed" in result.stderr


def test_second_up_keeps_nodes_and_image(cluster):
    before = containers()
    again = torchfleet("cluster", "up", "--name", NAME, "--nodes", "2", "--inventory", str(cluster["inventory"]),
                       env=cluster["env"])
    assert again.returncode == 0, again.stderr
    assert "building" not in again.stderr
    assert containers() == before


def test_up_refuses_nodes_started_for_another_key(cluster, tmp_path):
    """Another state directory under the same name has another key: adopting those nodes would end
    in "Permission denied" at the first ssh, so `up` refuses and names the way out."""
    before = containers()
    other = torchfleet("cluster", "up", "--name", NAME, "--nodes", "2", "--inventory", str(tmp_path / "inv.yml"),
                       env=dict(cluster["env"], XDG_STATE_HOME=str(tmp_path / "other-state")))
    assert other.returncode != 0
    assert f"tf-{NAME}-node0 exists but was started for another SSH key" in other.stderr
    assert "--name" in other.stderr and not (tmp_path / "inv.yml").exists()
    assert containers() == before


def test_status_lists_the_nodes(cluster):
    result = torchfleet("cluster", "status", "--name", NAME, "--json", env=cluster["env"])
    rows = json.loads(result.stdout)
    assert [r["name"] for r in rows] == [f"tf-{NAME}-node0", f"tf-{NAME}-node1"]
    assert all(r["running"] and r["address"] for r in rows)


def test_down_removes_what_up_made_and_nothing_else(tmp_path):
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    name = "tfdown"
    inventory = tmp_path / "inventory" / "tfdown.yml"
    mine = tmp_path / "inventory" / "mine.yml"
    mine.parent.mkdir(parents=True)
    mine.write_text("all: {}\n")
    bystander = "tf-tfdown-bystander"
    docker("rm", "-f", bystander)
    assert docker("create", "--name", bystander, "torchfleet/node:bookworm").returncode == 0
    try:
        assert torchfleet("cluster", "up", "--name", name, "--nodes", "1", "--inventory", str(inventory),
                          env=env).returncode == 0
        assert inventory.exists()
        down = torchfleet("cluster", "down", "--name", name, env=env)
        assert down.returncode == 0, down.stderr
        assert docker("ps", "-a", "--filter", f"label=org.torchfleet.cluster={name}", "-q").stdout == ""
        assert docker("network", "inspect", f"tf-{name}").returncode != 0
        assert not inventory.exists() and mine.exists()
        assert not (tmp_path / "state" / "torchfleet" / name).exists()
        assert docker("inspect", bystander).returncode == 0
        # down twice is harmless
        assert torchfleet("cluster", "down", "--name", name, env=env).returncode == 0
    finally:
        docker("rm", "-f", bystander)
