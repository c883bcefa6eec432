"""torchfleet/devcluster/traffic.py: the iptables rule that counts the controller's bytes into a
cluster, the sum read back from its listing, and the nodes' receive counters. No rule is made."""

import os
import subprocess

import pytest

from torchfleet.devcluster import traffic
from torchfleet.devcluster.engine import ClusterError

SUBNETS = ("network", "inspect", "--format", "{{range .IPAM.Config}}{{.Subnet}} {{end}}", "tf-lab")


def fake_run(monkeypatch, stdout=""):
    calls = []

    def run(argv, check=True):
        calls.append((argv, check))
        return subprocess.CompletedProcess(argv, 0, stdout, "")
    monkeypatch.setattr(traffic, "run", run)
    return calls


def test_the_rule_matches_the_clusters_ipv4_subnet_under_a_comment_naming_cluster_and_process(fake_docker):
    calls = fake_docker(traffic, {SUBNETS: "fd00:1::/64 172.18.0.0/16 \n"})
    counter = traffic.ControllerTraffic("lab")
    assert calls == [SUBNETS]
    assert counter.spec == ["OUTPUT", "-d", "172.18.0.0/16", "-m", "comment", "--comment", f"torchfleet-traffic-lab-{os.getpid()}"]


def test_a_network_without_an_ipv4_subnet_is_named_with_the_commands_that_make_the_cluster_again(fake_docker):
    fake_docker(traffic, {SUBNETS: "fd00:1::/64\n"})
    with pytest.raises(ClusterError) as raised:
        traffic.ControllerTraffic("lab")
    assert str(raised.value) == ("network tf-lab has no IPv4 subnet (fd00:1::/64) to count the controller's traffic on: "
                                 "recreate the cluster with `torchfleet cluster down --name lab` and "
                                 "`torchfleet cluster up --name lab`")


def test_the_rule_is_inserted_on_entering_and_deleted_on_leaving_without_failing_there(monkeypatch, fake_docker):
    fake_docker(traffic, {SUBNETS: "172.18.0.0/16\n"})
    calls = fake_run(monkeypatch)
    with traffic.ControllerTraffic("lab") as counter:
        assert calls == [(["iptables", "-I", *counter.spec], True)]
    assert calls[1:] == [(["iptables", "-D", *counter.spec], False)]


def test_sent_adds_the_bytes_column_of_this_rules_lines_and_no_other_rule_whose_comment_begins_alike(monkeypatch, fake_docker):
    fake_docker(traffic, {SUBNETS: "172.18.0.0/16\n"})
    pid = os.getpid()
    listing = (
        "Chain OUTPUT (policy ACCEPT 5321 packets, 901234 bytes)\n"
        "    pkts      bytes target     prot opt in     out     source               destination\n"
        f"      40     6000            all  --  *      *       0.0.0.0/0            172.18.0.0/16        /* torchfleet-traffic-lab-{pid} */\n"
        f"       3      250            all  --  *      *       0.0.0.0/0            172.18.0.0/16        /* torchfleet-traffic-lab-{pid}0 */\n"
        f"       2      120            all  --  *      *       0.0.0.0/0            172.18.0.0/16        /* torchfleet-traffic-lab-{pid} */\n"
        "     900    80000 ACCEPT     all  --  *      lo      0.0.0.0/0            0.0.0.0/0\n"
    )
    calls = fake_run(monkeypatch, listing)
    assert traffic.ControllerTraffic("lab").sent() == 6120
    assert calls == [(["iptables", "-L", "OUTPUT", "-v", "-x", "-n"], True)]


def test_received_bytes_reads_each_nodes_eth0_rx_counter_as_a_number(fake_docker):
    counter = "/sys/class/net/eth0/statistics/rx_bytes"
    calls = fake_docker(traffic, {("exec", "tf-lab-node0", "cat", counter): "1048576\n",
                                  ("exec", "tf-lab-node1", "cat", counter): "42\n"})
    assert traffic.received_bytes(["tf-lab-node0", "tf-lab-node1"]) == {"tf-lab-node0": 1048576, "tf-lab-node1": 42}
    assert calls == [("exec", "tf-lab-node0", "cat", counter), ("exec", "tf-lab-node1", "cat", counter)]
