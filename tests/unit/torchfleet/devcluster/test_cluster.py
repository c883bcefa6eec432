"""torchfleet/devcluster/cluster.py: the names, docker commands, inventory and known_hosts of a local
cluster, and what `down` removes. `docker` is a stand-in: no container is started."""

import json
from types import SimpleNamespace

import pytest
import yaml

from torchfleet.devcluster import cluster
from torchfleet.devcluster.cluster import Node
from torchfleet.devcluster.engine import ClusterError

LABEL_FORMAT = '{{index .Labels "org.torchfleet.cluster"}}'
PS_LAB = ("ps", "-a", "--filter", "label=org.torchfleet.cluster=lab", "--format", "{{.Names}}")


def inspected(running=True, paused=False, networks=None, hostname="node1"):
    return (0, json.dumps([{"State": {"Running": running, "Paused": paused}, "Config": {"Hostname": hostname},
                            "NetworkSettings": {"Networks": networks or {}}}]))


def test_a_cluster_name_of_letters_digits_and_dashes_is_taken_and_anything_else_is_named_and_refused():
    assert cluster.validate_name("gpu-lab-2") == "gpu-lab-2"
    for bad in ["", "-lab", "x;y", "a b", "a_b", "a.b", "lab/2", "café", "x²"]:
        with pytest.raises(ClusterError) as raised:
            cluster.validate_name(bad)
        assert str(raised.value) == f"cluster name {bad!r} is not valid: use ASCII letters, digits and '-'"


def test_the_inventory_lists_each_node_at_its_address_and_known_hosts_pins_every_host_key(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    inventory = tmp_path / "inventory" / "lab.yml"
    nodes = [(Node("tf-lab-node0", "node0", "172.18.0.2"), ["ssh-ed25519 AAAA0", "ecdsa-sha2-nistp256 BBBB0"]),
             (Node("tf-lab-node1", "node1", "172.18.0.3"), ["ssh-ed25519 AAAA1"])]
    cluster.write_inventory(inventory, "lab", nodes, state)
    assert (state / "known_hosts").read_text() == ("tf-lab-node0,172.18.0.2 ssh-ed25519 AAAA0\n"
                                                   "tf-lab-node0,172.18.0.2 ecdsa-sha2-nistp256 BBBB0\n"
                                                   "tf-lab-node1,172.18.0.3 ssh-ed25519 AAAA1\n")
    text = inventory.read_text()
    assert text.startswith("# Written by `torchfleet cluster up --name lab`; removed by `torchfleet cluster down --name lab`.\n")
    assert yaml.safe_load(text) == {"all": {"children": {"cluster": {
        "hosts": {"tf-lab-node0": {"ansible_host": "172.18.0.2"}, "tf-lab-node1": {"ansible_host": "172.18.0.3"}},
        "vars": {"ansible_user": "root",
                 "ansible_ssh_private_key_file": str(state / "id_ed25519"),
                 "ansible_ssh_common_args": f"-o UserKnownHostsFile={state / 'known_hosts'} -o StrictHostKeyChecking=yes",
                 "torchfleet_head": "tf-lab-node0"}}}}}


def test_down_removes_this_clusters_nodes_network_inventory_and_state_and_keeps_what_it_did_not_write(tmp_path, monkeypatch, fake_docker):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    state = tmp_path / "xdg" / "torchfleet" / "lab"
    state.mkdir(parents=True)
    inventory = tmp_path / "elsewhere.yml"
    inventory.write_text("# Written by `torchfleet cluster up --name lab`; ...\nall: {}\n")
    (state / "inventory-path").write_text(str(inventory))
    monkeypatch.setattr(cluster, "engine_answers", lambda: True)
    calls = fake_docker(cluster, {PS_LAB: (0, "tf-lab-node1\ntf-lab-node0\n"),
                                  ("network", "inspect", "--format", LABEL_FORMAT, "tf-lab"): (0, "lab\n")})
    cluster.down("lab")
    assert [call for call in calls if call[0] != "ps" and call[:2] != ("network", "inspect")] == [
        ("rm", "-f", "tf-lab-node0"), ("rm", "-f", "tf-lab-node1"), ("network", "rm", "tf-lab")]
    assert not inventory.exists() and not state.exists()

    users_own = tmp_path / "hosts.yml"
    users_own.write_text("all: {}\n")
    calls = fake_docker(cluster, {PS_LAB: (0, ""),
                                  ("network", "inspect", "--format", LABEL_FORMAT, "tf-lab"): (0, "someone-else\n")})
    cluster.down("lab", inventory=users_own)
    assert ("network", "rm", "tf-lab") not in calls
    assert users_own.read_text() == "all: {}\n"


def test_the_network_is_made_with_the_cluster_label_reused_when_ours_and_refused_when_foreign(fake_docker):
    inspect = ("network", "inspect", "--format", LABEL_FORMAT, "tf-lab")
    calls = fake_docker(cluster, {inspect: (1, "")})
    cluster.ensure_network("lab")
    assert calls == [inspect, ("network", "create", "--label", "org.torchfleet.cluster=lab", "tf-lab")]
    calls = fake_docker(cluster, {inspect: (0, "lab\n")})
    cluster.ensure_network("lab")
    assert calls == [inspect]
    fake_docker(cluster, {inspect: (0, "\n")})
    with pytest.raises(ClusterError, match="a Docker network named tf-lab exists and was not made by torchfleet; "
                                           "remove it or choose another cluster name with --name"):
        cluster.ensure_network("lab")


def test_nodes_started_for_another_ssh_key_are_refused_with_the_command_that_removes_them(tmp_path, monkeypatch, fake_docker):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    env_of = ("inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}")
    ours = (0, "PATH=/usr/bin\nTORCHFLEET_AUTHORIZED_KEY=ssh-ed25519 OURS\n")
    fake_docker(cluster, {PS_LAB: (0, "tf-lab-node0\ntf-lab-node1\n"),
                          (*env_of, "tf-lab-node0"): ours, (*env_of, "tf-lab-node1"): ours})
    cluster.refuse_foreign_nodes("lab", "ssh-ed25519 OURS")
    fake_docker(cluster, {PS_LAB: (0, "tf-lab-node0\ntf-lab-node1\n"), (*env_of, "tf-lab-node0"): ours,
                          (*env_of, "tf-lab-node1"): (0, "TORCHFLEET_AUTHORIZED_KEY=ssh-ed25519 OURS-OLD\n")})
    with pytest.raises(ClusterError) as raised:
        cluster.refuse_foreign_nodes("lab", "ssh-ed25519 OURS")
    message = str(raised.value)
    assert message.startswith(f"tf-lab-node1 exists but was started for another SSH key than {tmp_path / 'torchfleet' / 'lab'} holds")
    assert "`torchfleet cluster down --name lab`" in message


def test_a_node_is_run_with_its_names_key_and_shared_directory_and_an_existing_one_of_the_image_is_kept(tmp_path, fake_docker):
    state = ("inspect", "--format", "{{.State.Running}} {{.Config.Image}}", "tf-lab-node2")
    calls = fake_docker(cluster, {state: (0, "true other/image\n")})
    cluster.start_node("lab", 2, "ssh-ed25519 KEY", "torchfleet/node:bookworm", tmp_path)
    assert calls[1:] == [
        ("rm", "-f", "tf-lab-node2"),
        ("run", "-d", "--name", "tf-lab-node2", "--hostname", "node2", "--domainname", "lab.torchfleet.test",
         "--label", "org.torchfleet.cluster=lab", "--network", "tf-lab",
         "--network-alias", "node2", "--network-alias", "node2.lab.torchfleet.test",
         "--cap-add", "NET_ADMIN", "--env", "TORCHFLEET_AUTHORIZED_KEY=ssh-ed25519 KEY",
         "--volume", f"{tmp_path}:/shared", "torchfleet/node:bookworm")]
    calls = fake_docker(cluster, {state: (0, "false torchfleet/node:bookworm\n")})
    cluster.start_node("lab", 2, "ssh-ed25519 KEY", "torchfleet/node:bookworm", tmp_path)
    assert calls[1:] == [("start", "tf-lab-node2")]
    calls = fake_docker(cluster, {state: (0, "true torchfleet/node:bookworm\n")})
    cluster.start_node("lab", 2, "ssh-ed25519 KEY", "torchfleet/node:bookworm", tmp_path)
    assert calls == [state]


def test_restore_node_puts_a_paused_disconnected_node_back_on_eth0_and_says_what_it_did(fake_docker):
    calls = fake_docker(cluster, {("inspect", "tf-lab-node1"): inspected(paused=True, networks={"bridge": {}}),
                                  ("exec", "tf-lab-node1", "ip", "link", "show", "eth0"): (1, "")})
    assert cluster.restore_node("lab", 1) == ["unpaused tf-lab-node1", "reconnected tf-lab-node1", "restarted tf-lab-node1"]
    assert ("network", "connect", "--alias", "node1", "--alias", "node1.lab.torchfleet.test", "tf-lab", "tf-lab-node1") in calls
    assert calls[-1] == ("restart", "--time", "1", "tf-lab-node1")
    calls = fake_docker(cluster, {("inspect", "tf-lab-node1"): inspected(running=False, networks={"tf-lab": {}})})
    assert cluster.restore_node("lab", 1) == ["started tf-lab-node1"]
    fake_docker(cluster, {("inspect", "tf-lab-node1"): inspected(networks={"tf-lab": {}})})
    assert cluster.restore_node("lab", 1) == []


def test_node_facts_take_the_cluster_network_address_and_host_keys_without_comments_or_fail_with_the_log(monkeypatch, fake_docker):
    networks = {"bridge": {"IPAddress": "172.17.0.5"}, "tf-lab": {"IPAddress": "172.18.0.3"}}
    keys = "ecdsa-sha2-nistp256 BBBB root@node1\nssh-ed25519 AAAA root@node1\n\n"
    cat = ("exec", "tf-lab-node1", "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub")
    fake_docker(cluster, {("inspect", "tf-lab-node1"): inspected(networks=networks), cat: (0, keys)})
    monkeypatch.setattr(cluster, "port_open", lambda address, port: (address, port) == ("172.18.0.3", 22))
    assert cluster.node_facts("lab", "tf-lab-node1") == (
        Node(name="tf-lab-node1", hostname="node1", address="172.18.0.3"),
        ["ecdsa-sha2-nistp256 BBBB", "ssh-ed25519 AAAA"])

    clock = iter([0.0, 0.0, 61.0])
    monkeypatch.setattr(cluster, "time", SimpleNamespace(monotonic=lambda: next(clock), sleep=lambda seconds: None))
    fake_docker(cluster, {("inspect", "tf-lab-node1"): inspected(networks=networks),
                          cat: (1, ""), ("logs", "--tail", "20", "tf-lab-node1"): (0, "sshd: no hostkeys available\n")})
    with pytest.raises(ClusterError) as raised:
        cluster.node_facts("lab", "tf-lab-node1")
    assert str(raised.value) == "tf-lab-node1 did not start sshd within 60s; its log:\nsshd: no hostkeys available\n"


def test_up_refuses_no_nodes_an_image_with_slurm_and_a_missing_image_before_it_starts_anything(monkeypatch):
    monkeypatch.setattr(cluster, "ensure_engine", lambda: pytest.fail("Docker is not asked about no nodes"))
    with pytest.raises(ClusterError, match="^--nodes must be 1 or more, not 0$"):
        cluster.up("lab", nodes=0)
    monkeypatch.setattr(cluster, "ensure_engine", lambda: None)
    monkeypatch.setattr(cluster, "ensure_network", lambda name: pytest.fail("no network is made"))
    with pytest.raises(ClusterError, match="^--slurm brings its own node image; give no image with it$"):
        cluster.up("lab", image="site/golden", slurm=True)
    monkeypatch.setattr(cluster, "image_exists", lambda image: False)
    with pytest.raises(ClusterError) as raised:
        cluster.up("lab", image="site/golden")
    assert str(raised.value) == "no image site/golden: build it first (from torchfleet/node:bookworm, whose sshd start it needs)"
