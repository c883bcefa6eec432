"""The CLI through a bastion configured for Ansible alone (issue 28, point 4).

The inventory names the nodes by their names on the cluster's Docker network, which only the
containers resolve: the controller reaches them through one more container, the bastion, and
only because Ansible's own settings say so (ANSIBLE_SSH_ARGS, as ansible.cfg's ssh_args would:
an ssh config file with the bastion, and ProxyJump). The playbooks take those settings; so must
every ssh the CLI opens itself, the stream of a run's output above all. Host keys stay checked,
the bastion's and the nodes' (under the names the inventory gives).

The same file: a login account that needs sudo's password on the head (-K, or the inventory's
ansible_become_password), which the stream's sudo takes as the playbooks' become does.

Shares the session's cluster; the bastion and the account are removed at the end.
"""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ready_cluster import NAME, NODES, REPO, run
from torchfleet import devcluster
from torchfleet.devcluster import DOMAIN

pytestmark = pytest.mark.cluster
BASTION = f"tf-{NAME}-bastion"
# What is proved is the way through the bastion, not training: ranks that print and sleep, with
# no torch to import (ticker.py says why).
SHORT_RUN = ["tests/integration/ticker.py", "-e", "nproc_per_node=1", "--", "--ticks", "3", "--sleep", "0.2"]


def ticker_done(output):
    """Rank 0's last line, `TICKER_DONE {...}`, as a dict."""
    assert "TICKER_DONE " in output, output[-3000:]
    return json.loads(output.rsplit("TICKER_DONE ", 1)[1].splitlines()[0])


def docker(*argv):
    return run(["docker", *argv], timeout=120)


@pytest.fixture(scope="module")
def behind_bastion(cluster, tmp_path_factory):
    """(inventory, environment) that reach the cluster through the bastion alone."""
    tmp = tmp_path_factory.mktemp("bastion")
    given = yaml.safe_load(cluster.inventory.read_text())["all"]["children"]["cluster"]
    key = given["vars"]["ansible_ssh_private_key_file"]
    docker("rm", "-f", BASTION)
    started = docker("run", "-d", "--name", BASTION, "--label", f"{devcluster.LABEL}={NAME}",
                     "--network", f"tf-{NAME}", "--cap-add", "NET_ADMIN", "--env",
                     f"TORCHFLEET_AUTHORIZED_KEY={open(key + '.pub').read().strip()}",
                     # The plain node image: a node's own may be a set-up node's snapshot, whose
                     # slurmd refuses to start on a host its slurm.conf does not name.
                     devcluster.IMAGE)
    assert started.returncode == 0, started.stderr
    try:
        bastion, bastion_keys = devcluster.node_facts(NAME, BASTION)  # waits for its sshd
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
    result = ticker_done(launched.stdout)
    assert result["world_size"] == 3, result
    listed = torchfleet(behind_bastion, "runs", "--json")
    assert listed.returncode == 0, listed.stderr[-3000:]
    run_id = json.loads(listed.stdout)[0]["run_id"]
    logs = torchfleet(behind_bastion, "logs", run_id)
    assert logs.returncode == 0, logs.stderr[-3000:]
    assert ticker_done(logs.stdout) == result
    waited = torchfleet(behind_bastion, "wait", run_id)
    assert waited.returncode == 0 and "succeeded" in waited.stdout, (waited.stdout, waited.stderr[-3000:])
    print(f"through {BASTION}: run {run_id} launched, followed, its logs and end read again")


SUDO_PASSWORD = "tf-sudo-Pw 7"  # a space in it, as passwords have


@pytest.fixture
def login_needing_sudo_password(cluster, tmp_path):
    """An inventory whose login account on the head (`ops`, the cluster's key) is neither root
    nor the training account, and needs sudo's password: the CLI reaches the runs through sudo."""
    head = NODES[0]
    made = docker("exec", head, "sh", "-c",
                  "useradd -m -s /bin/sh ops && echo \"ops:$0\" | chpasswd"
                  " && echo 'ops ALL=(ALL) ALL' > /etc/sudoers.d/tf-test-ops && chmod 440 /etc/sudoers.d/tf-test-ops"
                  " && install -d -o ops -m 700 /home/ops/.ssh"
                  " && install -o ops -m 600 /root/.ssh/authorized_keys /home/ops/.ssh/authorized_keys",
                  SUDO_PASSWORD)
    assert made.returncode == 0, made.stderr
    try:
        inventory = yaml.safe_load(cluster.inventory.read_text())
        inventory["all"]["children"]["cluster"]["vars"]["ansible_user"] = "ops"
        path = tmp_path / "inventory.yml"
        path.write_text(yaml.safe_dump(inventory))
        yield path, inventory, cluster.env
    finally:
        docker("exec", head, "sh", "-c", "userdel -r ops; rm -f /etc/sudoers.d/tf-test-ops")


def as_ops(target, *args, password=None):
    """torchfleet as `ops`, with no terminal: -K's prompt reads `password` from stdin."""
    path, _inventory, env = target
    argv = [sys.executable, "-m", "torchfleet", args[0], "-i", str(path), *args[1:]]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
                          input=None if password is None else password + "\n", start_new_session=True)


def test_logs_and_wait_through_sudo_with_its_password(cluster, login_needing_sudo_password, tmp_path):
    launched = subprocess.run([sys.executable, "-m", "torchfleet", "launch", "-i", str(cluster.inventory),
                               *SHORT_RUN], cwd=REPO, env=cluster.env, capture_output=True, text=True,
                              timeout=600, check=False)
    assert launched.returncode == 0, (launched.stdout[-3000:], launched.stderr[-3000:])
    result = ticker_done(launched.stdout)
    listed = subprocess.run([sys.executable, "-m", "torchfleet", "runs", "--json", "-i", str(cluster.inventory)],
                            cwd=REPO, env=cluster.env, capture_output=True, text=True, timeout=300, check=False)
    assert listed.returncode == 0, listed.stderr[-2000:]
    run_id = json.loads(listed.stdout)[0]["run_id"]

    # Without the password: refused at once, naming sudo and the fix.
    refused = as_ops(login_needing_sudo_password, "logs", run_id)
    assert refused.returncode != 0, refused.stdout[-2000:]
    assert "sudo" in refused.stderr and "-K" in refused.stderr, refused.stderr[-2000:]

    # -K: the playbook's become and the stream's sudo both take it.
    logs = as_ops(login_needing_sudo_password, "logs", run_id, "-K", password=SUDO_PASSWORD)
    assert logs.returncode == 0, (logs.stdout[-2000:], logs.stderr[-2000:])
    assert ticker_done(logs.stdout) == result
    waited = as_ops(login_needing_sudo_password, "wait", run_id, "-K", password=SUDO_PASSWORD)
    assert waited.returncode == 0 and "succeeded" in waited.stdout, (waited.stdout, waited.stderr[-2000:])

    wrong = as_ops(login_needing_sudo_password, "logs", run_id, "-K", password="not it")
    assert wrong.returncode != 0, wrong.stdout[-2000:]
    assert SUDO_PASSWORD not in wrong.stdout + wrong.stderr
    assert "password" in wrong.stderr, wrong.stderr[-2000:]

    # The inventory's ansible_become_password, with no -K: the same.
    path, inventory, env = login_needing_sudo_password
    inventory["all"]["children"]["cluster"]["vars"]["ansible_become_password"] = SUDO_PASSWORD
    with_var = tmp_path / "with-password.yml"
    with_var.write_text(yaml.safe_dump(inventory))
    logs = as_ops((with_var, inventory, env), "logs", run_id)
    assert logs.returncode == 0, (logs.stdout[-2000:], logs.stderr[-2000:])
    assert ticker_done(logs.stdout) == result
    assert SUDO_PASSWORD not in logs.stdout + logs.stderr
    print(f"run {run_id} read as ops through sudo: refused without the password, read with -K and with "
          f"ansible_become_password, refused with a wrong one")
