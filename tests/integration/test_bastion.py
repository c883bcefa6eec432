"""The CLI through a bastion configured for Ansible alone (issue 28, point 4).

The inventory names the nodes by their names on the cluster's Docker network, which only the
containers resolve: the controller reaches them through one more container, the bastion, and
only because Ansible's own settings say so (ANSIBLE_SSH_ARGS, as ansible.cfg's ssh_args would:
an ssh config file with the bastion, and ProxyJump). The playbooks take those settings; so must
every ssh the CLI opens itself, the stream of a run's output above all. Host keys stay checked,
the bastion's and the nodes' (under the names the inventory gives).

Shares the session's cluster; the bastion is removed at the end.
"""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ready_cluster import NAME, NODES, REPO, run, training_result
from torchfleet import devcluster
from torchfleet.devcluster import DOMAIN

pytestmark = pytest.mark.cluster
BASTION = f"tf-{NAME}-bastion"
SHORT_RUN = ["examples/train.py", "-e", "nproc_per_node=1", "--", "--use-syn", "--epochs", "1",
             "--steps-per-epoch", "3", "--no-wandb", "--out-dir", "/tmp"]


def docker(*argv):
    return run(["docker", *argv], timeout=120)


@pytest.fixture(scope="module")
def behind_bastion(cluster, tmp_path_factory):
    """(inventory, environment) that reach the cluster through the bastion alone."""
    tmp = tmp_path_factory.mktemp("bastion")
    given = yaml.safe_load(cluster.inventory.read_text())["all"]["children"]["cluster"]
    key = given["vars"]["ansible_ssh_private_key_file"]
    image = docker("inspect", "--format", "{{.Config.Image}}", NODES[0]).stdout.strip()
    docker("rm", "-f", BASTION)
    started = docker("run", "-d", "--name", BASTION, "--label", f"{devcluster.LABEL}={NAME}",
                     "--network", f"tf-{NAME}", "--cap-add", "NET_ADMIN", "--env",
                     f"TORCHFLEET_AUTHORIZED_KEY={open(key + '.pub').read().strip()}", image)
    assert started.returncode == 0, started.stderr
    try:
        bastion, bastion_keys = devcluster._node_facts(NAME, BASTION)  # waits for its sshd
        # The nodes' host keys, under the names the inventory gives them (their own, read
        # through Docker when the cluster came up).
        known = tmp / "known_hosts"
        lines = [f"{bastion.address} {k}" for k in bastion_keys]
        known_by_node = {}
        for line in (Path(key).parent / "known_hosts").read_text().splitlines():  # the cluster's state
            names, host_key = line.split(" ", 1)
            known_by_node.setdefault(names.split(",")[0], []).append(host_key)
        aliases = {node: f"node{i}.{NAME}.{DOMAIN}" for i, node in enumerate(NODES)}
        lines += [f"{aliases[node]} {k}" for node in NODES for k in known_by_node[node]]
        known.write_text("\n".join(lines) + "\n")
        config = tmp / "ssh_config"
        config.write_text(f"Host tf-bastion\n  HostName {bastion.address}\n  User root\n  IdentityFile {key}\n"
                          f"  IdentitiesOnly yes\n  UserKnownHostsFile {known}\n  StrictHostKeyChecking yes\n")
        inventory = tmp / "inventory.yml"
        inventory.write_text(yaml.safe_dump({"all": {"children": {"cluster": {
            "hosts": {node: {"ansible_host": aliases[node]} for node in NODES},
            "vars": {"ansible_user": "root", "ansible_ssh_private_key_file": key,
                     "torchfleet_head": NODES[0]}}}}}))
        env = dict(cluster.env, ANSIBLE_SSH_ARGS=f"-F {config} -o ProxyJump=tf-bastion -o UserKnownHostsFile={known} "
                                                 f"-o StrictHostKeyChecking=yes")
        yield str(inventory), env
    finally:
        docker("rm", "-f", BASTION)


def torchfleet(target, *args, timeout=600):
    inventory, env = target
    argv = [sys.executable, "-m", "torchfleet", args[0], "-i", inventory, *args[1:]]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def test_launch_logs_and_wait_stream_through_a_bastion_that_only_ansibles_settings_name(behind_bastion):
    inventory, env = behind_bastion
    # The controller itself cannot resolve the nodes' names: only the bastion reaches them.
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo(f"node0.{NAME}.{DOMAIN}", 22)
    without = {key: value for key, value in env.items() if key != "ANSIBLE_SSH_ARGS"}
    refused = torchfleet((inventory, without), "runs")
    assert refused.returncode != 0, refused.stdout[-2000:]

    launched = torchfleet(behind_bastion, "launch", *SHORT_RUN)
    assert launched.returncode == 0, (launched.stdout[-3000:], launched.stderr[-3000:])
    # Rank 0's lines came through the stream (ssh through the bastion), not from a playbook.
    result = training_result(launched.stdout)
    assert result["world_size"] == 3, result
    listed = torchfleet(behind_bastion, "runs", "--json")
    assert listed.returncode == 0, listed.stderr[-3000:]
    run_id = json.loads(listed.stdout)[0]["run_id"]
    logs = torchfleet(behind_bastion, "logs", run_id)
    assert logs.returncode == 0, logs.stderr[-3000:]
    assert training_result(logs.stdout) == result
    waited = torchfleet(behind_bastion, "wait", run_id)
    assert waited.returncode == 0 and "succeeded" in waited.stdout, (waited.stdout, waited.stderr[-3000:])
    print(f"through {BASTION}: run {run_id} launched, followed, its logs and end read again")
