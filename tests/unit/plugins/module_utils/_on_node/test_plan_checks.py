"""Unit tests for plugins/module_utils/_on_node/plan_checks.py: each problem in a launch plan names
itself and the fix, before anything is rendered."""

from __future__ import annotations

import re

import pytest
from plan_helpers import make_plan, node

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import Node, PlanError
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.plan_checks import validate
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.renderer import render


def test_plan_error_is_a_value_error():
    assert issubclass(PlanError, ValueError)


@pytest.mark.parametrize("overrides, expected", [
    (dict(nodes=()), "the plan has no nodes; add at least one host"),
    (dict(nodes=(node(1), node(1))), "node 'node1' is listed twice"),
    (dict(nodes=(node(1), Node("other", "172.18.0.2", 2, "eth0"))),
     "nodes 'node1' and 'other' share the address 172.18.0.2"),
    (dict(head="nodeX"), "head 'nodeX' is not one of the nodes (node1, node2, node3)"),
    (dict(mode="ssh"), "unknown mode 'ssh'; use one of: torchrun, rank, mpich"),
    (dict(port=80), "master_port is '80': give the rendezvous port on the head as a number from 1024 to 65535"),
    (dict(port=65536), "master_port is '65536': give the rendezvous port"),
    (dict(port="29500"), "master_port is '29500': give it as an integer"),
    (dict(port=True), "master_port is 'True': give the rendezvous port"),
    (dict(port=29500.0), "master_port is 29500.0: give it as an integer"),
    (dict(nodes=(node(1, slots=0),)), "node 'node1' has slots=0"),
    (dict(nodes=(node(1, slots="8"),)), "has slots='8'; slots is the number of workers"),
    (dict(run_id=""), "run_id '' is not valid"),
    (dict(run_id="has space"), "run_id 'has space' is not valid"),
    (dict(run_id="$(id)"), "1 to 64 characters"),
    (dict(run_id="x" * 65), "run_id"),
    (dict(script=""), "script must be a non-empty string"),
    (dict(script="-m"), "starts with '-' and would be read as an option"),
    (dict(script_args=(1, 2)), "script_args must contain only strings"),
    (dict(script_args="--epochs 3"), "script_args must be a list of strings"),
    (dict(script_args=("a\0b",)), "NUL byte"),
    (dict(torchrun=""), "torchrun must be a non-empty string"),
    (dict(hostfile_path=""), "hostfile_path must be a non-empty string"),
    (dict(network="nonsense"), "network 'nonsense' is not a CIDR such as 172.18.0.0/16"),
    (dict(network="127.0.0.0/8"), "is the loopback network"),
    (dict(network="10.0.0.0/8"), "node 'node1' address 172.18.0.2 is not on the cluster network"),
    (dict(nodes=(node(1), node(2, interface=None))), "node 'node2' has no cluster interface"),
    (dict(nodes=(Node("a", "localhost", 1),)), "other nodes cannot reach localhost"),
    (dict(nodes=(Node("a", "127.0.1.1", 1),)), "address 127.0.1.1, which other nodes cannot"),
    (dict(nodes=(Node("a", "::1", 1),)), "address ::1, which other nodes cannot reach"),
    (dict(nodes=(Node("a", "a b", 1),)), "has address 'a b'; give its IP address or DNS name"),
    (dict(nodes=(Node("a", "$(id)", 1),)), "give its IP address or DNS name"),
    (dict(nodes=(node(1, interface="eth0@if12"),)), "not an interface name"),
    (dict(nodes=(node(1, interface="eth0,eth1"),)), "not an interface name"),
    (dict(env_pass=("1BAD",)), "env_pass: '1BAD' is not a valid environment variable name"),
    (dict(env_secrets=("A-B",)), "env_secrets: 'A-B' is not a valid environment variable name"),
    (dict(env_set={"A B": "x"}), "env_set: 'A B' is not a valid environment variable name"),
    (dict(env_pass=("",)), "is not a valid environment variable name"),
    (dict(env_pass="PATH"), "env_pass must be a list of strings"),
    (dict(env_pass=("TOKEN",), env_secrets=("TOKEN",)), "TOKEN is in both env_pass and env_secrets"),
    (dict(env_set={"X": "1"}, env_secrets=("X",)), "X is in both env_secrets and env_set"),
    (dict(env_set={"MASTER_ADDR": "10.0.0.1"}), "MASTER_ADDR is set by torchfleet itself"),
    (dict(env_pass=("NCCL_SOCKET_IFNAME",)), "NCCL_SOCKET_IFNAME is set by torchfleet itself"),
    (dict(env_set={"N": 4}), "the value of N must be a string"),
    (dict(nproc_per_node=3), "nproc_per_node=3 but node1, node2, node3 have fewer slots"),
    (dict(nproc_per_node=0), "nproc_per_node=0; give an integer of at least 1"),
    (dict(mode="rank", nproc_per_node=2), "in rank mode each node runs its slots"),
    (dict(mode="mpich", log_dir="/var/log/tf"), "in mpich mode leave log_dir unset"),
    (dict(mode="mpich", allow_run_as_root=True), "allow_run_as_root is an Open MPI option"),
    (dict(mode="mpich", tree_spawn=True), "tree_spawn is an Open MPI option"),
    (dict(mode="mpich", ssh_control_path="/tmp/m/%C"), "which mpich mode does not use"),
    (dict(tree_spawn=True, ssh_control_path="/tmp/m/%C"), "which tree_spawn does not use"),
    (dict(ssh_control_path="/tmp/my dir/%C"), "has white space, which Open MPI would split"),
    (dict(ssh_control_path=""), "ssh_control_path must be a non-empty string"),
    (dict(mode="rank", node_log_dir="/runs/w"), "in rank mode use log_dir for per-rank logs"),
    (dict(node_log_dir=""), "node_log_dir must be a non-empty string"),
    (dict(silent_node_timeout=-1), "silent_node_timeout -1 is not a number of seconds; give 0 or more"),
    (dict(silent_node_timeout="60"), "silent_node_timeout '60' is not a number of seconds"),
    (dict(silent_node_timeout=True), "silent_node_timeout True is not a number of seconds"),
])
def test_invalid_plans_are_refused_with_a_fix(overrides, expected):
    with pytest.raises(PlanError) as err:
        render(make_plan(**overrides))
    assert expected in str(err.value)


@pytest.mark.parametrize("interface", ["lo", "docker0", "docker_gwbridge", "virbr0", "br-1a2b3c",
                                       "veth12ab"])
def test_loopback_and_bridge_interfaces_are_refused(interface):
    with pytest.raises(PlanError) as err:
        validate(make_plan(nodes=(node(1), node(2, interface=interface))))
    message = str(err.value)
    assert f"node 'node2': interface {interface} is loopback or a local bridge" in message
    assert "use the NIC that holds 172.18.0.3 on the cluster network" in message


@pytest.mark.parametrize("mode", ["torchrun", "mpich"])
def test_uneven_slots_are_refused_when_torchrun_runs_per_node(mode):
    nodes = (node(1, slots=8), node(2, slots=8), node(3, slots=4))
    with pytest.raises(PlanError) as err:
        render(make_plan(mode=mode, nodes=nodes))
    message = str(err.value)
    assert "torchrun starts the same number of workers on every node" in message
    assert "8 on node1, node2; 4 on node3" in message
    assert "fix the slots in the inventory, set nproc_per_node" in message


def test_uneven_slot_message_stays_short_on_big_clusters():
    nodes = tuple(Node(f"n{i}", f"10.0.{i // 256}.{i % 256}", 8 if i % 2 else 4, "eth0")
                  for i in range(1, 2001))
    with pytest.raises(PlanError) as err:
        render(make_plan(nodes=nodes, head="n1"))
    assert "8 on n1, n3, n5 and 997 more; 4 on n2, n4, n6 and 997 more" in str(err.value)
    assert len(str(err.value)) < 400


@pytest.mark.parametrize("extra, expected", [
    (("-np", "4"), "'-np' overrides an option torchfleet controls"),
    (("-n", "4"), "'-n' overrides"),
    (("--hostfile=/tmp/h",), "'--hostfile=/tmp/h' overrides"),
    (("-H", "a,b"), "'-H' overrides"),
    (("--host", "a"), "'--host' overrides"),
    (("--map-by", "node"), "'--map-by' overrides"),
    (("-npernode", "2"), "'-npernode' overrides"),
    (("--bind-to", "core"), "'--bind-to' overrides"),
    (("--output-filename", "/x"), "'--output-filename' overrides"),
    (("--allow-run-as-root",), "'--allow-run-as-root' overrides"),
    (("-x", "FOO=bar"), "'-x' passes environment on the command line; use env_pass"),
    (("--mca", "btl_tcp_if_include", "docker0"), "overrides an MCA parameter torchfleet sets"),
    (("-mca", "pml", "ucx"), "'-mca pml' overrides an MCA parameter"),
    (("--mca", "plm_rsh_no_tree_spawn", "0"), "overrides an MCA parameter torchfleet sets"),
    (("--mca", "oob_tcp_keepalive_time", "5"), "overrides the keepalive torchfleet sets from silent_node_timeout"),
    ((5,), "mpirun_extra_args must contain only strings, found 5"),
    (("",), "mpirun_extra_args contains an empty string"),
    ("--tag-output", "mpirun_extra_args must be a list of strings"),
])
def test_extra_args_cannot_override_what_torchfleet_controls(extra, expected):
    with pytest.raises(PlanError) as err:
        render(make_plan(mpirun_extra_args=extra))
    assert expected in str(err.value)


@pytest.mark.parametrize("extra, expected", [
    (("--ppn", "4"), "'--ppn' overrides"),
    (("--cpu-bind", "core"), "'--cpu-bind' overrides"),
    (("--env", "A=b"), "'--env' passes environment on the command line"),
    (("-genvlist", "A"), "'-genvlist' passes environment"),
])
def test_mpich_extra_args_cannot_override_either(extra, expected):
    with pytest.raises(PlanError) as err:
        render(make_plan(mode="mpich", mpirun_extra_args=extra))
    assert expected in str(err.value)


def test_harmless_extra_args_are_kept():
    extra = ("--mca", "btl_tcp_links", "2", "--report-bindings", "--timeout", "600")
    assert render(make_plan(mpirun_extra_args=extra)).argv[-10:-4] == list(extra)


def test_not_a_plan_is_refused():
    with pytest.raises(PlanError, match="expected a Plan"):
        validate({"nodes": []})


@pytest.mark.parametrize("extra, mode, expected", [
    (("--nnodes=2",), "torchrun", "'--nnodes=2' overrides an option torchfleet sets"),
    (("--nproc_per_node", "4"), "mpich", "'--nproc_per_node' overrides an option torchfleet sets"),
    (("--rdzv-endpoint=10.0.0.1:1",), "torchrun", "'--rdzv-endpoint=10.0.0.1:1' overrides"),
    (("--max-restarts=3",), "torchrun", "restarts from max_restarts"),
    (("--tee", "3"), "torchrun", "'--tee' overrides"),
    (("",), "torchrun", "'' is empty"),
    (("--monitor-interval=1",), "rank", "rank mode runs no torchrun"),
])
def test_torchrun_extra_args_may_not_set_what_torchfleet_sets(extra, mode, expected):
    with pytest.raises(PlanError, match=re.escape(expected)):
        validate(make_plan(mode=mode, torchrun_extra_args=extra))
    validate(make_plan(torchrun_extra_args=("--monitor-interval=1", "--local-ranks-filter", "0")))


@pytest.mark.parametrize("given, words", [
    (dict(scheduler="slurm"), "scheduler=slurm starts the run as one job"),
    (dict(mode="rank"), "mode rank runs no torchrun a node"),
    (dict(nodes=(node(1),)), "the run has one node"),
    (dict(expect_packages={"torch": "2.13.0", "numpy": "2"}), "setup installed no torchft"),
    (dict(torchft_heartbeat_ms=50), "torchft_heartbeat_ms is 50"),
    (dict(torchft_heartbeat_ms=True), "torchft_heartbeat_ms is True"),
])
def test_torchft_refusals_name_the_reason_and_the_fix(given, words):
    with pytest.raises(PlanError) as raised:
        validate(make_plan(fault_tolerance="torchft", **given))
    assert words in str(raised.value)


def test_torchft_is_accepted_where_setup_installed_it_and_an_unknown_value_is_refused():
    validate(make_plan(fault_tolerance="torchft", expect_packages={"torch": "2.13.0", "torchft": "0.2.0"}))
    with pytest.raises(PlanError, match="fault_tolerance is 'elastic'"):
        validate(make_plan(fault_tolerance="elastic"))
