"""Unit tests for plugins/module_utils/_launch_plan.py, the one launch renderer.

Golden files live in tests/unit/plugins/module_utils/golden/; regenerate them after an intended change with
    TORCHFLEET_UPDATE_GOLDEN=1 python -m pytest tests/unit/plugins/module_utils/test_launch_plan.py
and review the diff.

The quoting tests do not trust string comparison: they run the rendered `/bin/sh -c` part for
real, with torchrun/python replaced by a small program that reports the argv and environment it
received.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
# ansible_collections.torchfleet.cluster resolves through .collections (a symlink to the repo);
# it merges with the ansible package's own ansible_collections namespace package.
sys.path.insert(0, str(REPO / ".collections"))

from ansible_collections.torchfleet.cluster.plugins.module_utils import (  # noqa: E402
    _launch_plan as lp,
)
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_plan import (  # noqa: E402
    Node,
    Plan,
    PlanError,
    new_run_id,
    render,
    validate,
)

GOLDEN = Path(__file__).parent / "golden"
HOSTFILE = "/home/train/.torchfleet/runs/run-1/hostfile"


def node(i: int, slots: int = 2, interface: str | None = "eth0") -> Node:
    return Node(f"node{i}", f"172.18.0.{i + 1}", slots, interface)


def make_plan(**overrides) -> Plan:
    fields = dict(nodes=(node(1), node(2), node(3)), head="node1", script="/opt/tf/train.py",
                  run_id="run-1", hostfile_path=HOSTFILE)
    if overrides.get("mode") == "mpich":  # the PALS flavour unless a test names one
        fields["mpich_launcher"] = "pals"
    fields.update(overrides)
    return Plan(**fields)


def shell_tail(argv: list[str]) -> list[str]:
    """The `/bin/sh -c SCRIPT torchfleet ARGS...` part: what each rank runs on its node."""
    for i in range(len(argv) - 1):
        if argv[i] == lp.SHELL and argv[i + 1] == "-c":
            return argv[i:]
    raise AssertionError(f"no sh -c in {argv}")


# ---------------------------------------------------------------------------------------------
# Shapes of the rendered command
# ---------------------------------------------------------------------------------------------

TORCHRUN_3X2 = [
    "mpirun", "-np", "3", "--map-by", "ppr:1:node", "--bind-to", "none", "--hostfile", HOSTFILE,
    "--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "plm_rsh_no_tree_spawn", "1",
    "--mca", "oob_tcp_keepalive_time", "60", "--mca", "oob_tcp_keepalive_intvl", "20",
    "--mca", "oob_tcp_keepalive_probes", "3",
    "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
    "-x", "TORCHFLEET_RUN_ID", "-x", "NCCL_SOCKET_IFNAME", "-x", "GLOO_SOCKET_IFNAME",
    "--tag-output", "/bin/sh", "-c",
    'exec torchrun --nnodes=3 --node-rank="${OMPI_COMM_WORLD_RANK:?not started by Open MPI mpirun}"'
    ' --nproc-per-node=2 --rdzv-backend=static --rdzv-endpoint=172.18.0.2:29500 --rdzv-id=run-1'
    ' /opt/tf/train.py "$@"',
    "torchfleet", "--epochs", "3",
]


def test_torchrun_mode_three_nodes_exact_argv():
    rendered = render(make_plan(script_args=("--epochs", "3")))
    assert rendered.argv == TORCHRUN_3X2
    assert rendered.hostfile == "172.18.0.2 slots=2\n172.18.0.3 slots=2\n172.18.0.4 slots=2\n"
    assert rendered.env == {"TORCHFLEET_RUN_ID": "run-1", "NCCL_SOCKET_IFNAME": "eth0",
                            "GLOO_SOCKET_IFNAME": "eth0"}
    assert rendered.nodes == ("node1", "node2", "node3")
    assert rendered.world_size == 6
    assert rendered.per_node_env == {}


def test_argv_is_a_list_of_strings():
    for mode in lp.MODES:
        rendered = render(make_plan(mode=mode))
        assert isinstance(rendered.argv, list)
        assert all(isinstance(word, str) for word in rendered.argv)


def test_head_goes_first_wherever_it_is_listed():
    rendered = render(make_plan(head="node3"))
    assert rendered.hostfile.splitlines() == [
        "172.18.0.4 slots=2", "172.18.0.2 slots=2", "172.18.0.3 slots=2"]
    assert rendered.nodes == ("node3", "node1", "node2")
    assert "--rdzv-endpoint=172.18.0.4:29500" in shell_tail(rendered.argv)[2]


def test_one_node_is_standalone():
    rendered = render(make_plan(nodes=(node(1, slots=4, interface=None),)))
    script = shell_tail(rendered.argv)[2]
    assert script == 'exec torchrun --standalone --nnodes=1 --nproc-per-node=4 /opt/tf/train.py "$@"'
    assert "btl_tcp_if_include" not in rendered.argv  # no interface known, none needed
    assert rendered.hostfile == "172.18.0.2 slots=4\n"
    assert rendered.env == {"TORCHFLEET_RUN_ID": "run-1"}
    assert rendered.world_size == 4


def test_one_node_with_interface_still_sets_nccl_and_gloo():
    rendered = render(make_plan(nodes=(node(1),)))
    assert rendered.env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert "--standalone" in shell_tail(rendered.argv)[2]


def test_port_and_run_id_reach_rendezvous():
    script = shell_tail(render(make_plan(port=30123, run_id="exp_7.b-2")).argv)[2]
    assert "--rdzv-endpoint=172.18.0.2:30123" in script
    assert "--rdzv-id=exp_7.b-2" in script


def test_ipv6_head_endpoint_is_bracketed():
    nodes = (Node("a", "fd00::2", 2, "eth0"), Node("b", "fd00::3", 2, "eth0"))
    rendered = render(make_plan(nodes=nodes, head="a", network="fd00::/64"))
    assert "'--rdzv-endpoint=[fd00::2]:29500'" in shell_tail(rendered.argv)[2]
    assert rendered.hostfile == "fd00::2 slots=2\nfd00::3 slots=2\n"


def test_rank_mode_shape_with_uneven_slots():
    nodes = (node(1, slots=4), node(2, slots=2))
    rendered = render(make_plan(mode="rank", nodes=nodes, python="/opt/env/bin/python"))
    argv = rendered.argv
    assert argv[:5] == ["mpirun", "-np", "6", "--map-by", "slot"]
    assert argv[5:9] == ["--bind-to", "none", "--hostfile", HOSTFILE]
    assert rendered.hostfile == "172.18.0.2 slots=4\n172.18.0.3 slots=2\n"
    assert rendered.env["MASTER_ADDR"] == "172.18.0.2"
    assert rendered.env["MASTER_PORT"] == "29500"
    for name in ("MASTER_ADDR", "MASTER_PORT", "TORCHFLEET_RUN_ID"):
        assert ["-x", name] == argv[argv.index(name) - 1:argv.index(name) + 1]
    script = shell_tail(argv)[2]
    assert script.endswith('exec /opt/env/bin/python /opt/tf/train.py "$@"')
    assert rendered.world_size == 6


def test_mpich_mode_exact_argv():
    rendered = render(make_plan(mode="mpich", torchrun="/opt/env/bin/torchrun"))
    assert rendered.argv == [
        "mpiexec", "-n", "3", "--ppn", "1", "--cpu-bind", "none", "--hostfile", HOSTFILE,
        "--envall", "/bin/sh", "-c",
        'exec /opt/env/bin/torchrun --nnodes=3'
        ' --node-rank="${PMI_RANK:-${PALS_RANKID:?not started by mpiexec}}" --nproc-per-node=2'
        ' --rdzv-backend=static --rdzv-endpoint=172.18.0.2:29500 --rdzv-id=run-1'
        ' /opt/tf/train.py "$@"',
        "torchfleet",
    ]
    assert rendered.hostfile == "172.18.0.2\n172.18.0.3\n172.18.0.4\n"
    assert "-x" not in rendered.argv


def test_hydra_flavour_exact_argv():
    rendered = render(make_plan(mode="mpich", mpich_launcher="hydra", torchrun="/opt/env/bin/torchrun",
                                launcher="/usr/bin/mpiexec.hydra", env_secrets=("TOKEN",)))
    assert rendered.argv == [
        "/usr/bin/mpiexec.hydra", "-launcher", "ssh", "-n", "3", "-ppn", "1", "-f", HOSTFILE,
        "-bind-to", "none", "-genvall", "-iface", "eth0", "-prepend-rank", "/bin/sh", "-c",
        'exec /opt/env/bin/torchrun --nnodes=3'
        ' --node-rank="${PMI_RANK:-${PALS_RANKID:?not started by mpiexec}}" --nproc-per-node=2'
        ' --rdzv-backend=static --rdzv-endpoint=172.18.0.2:29500 --rdzv-id=run-1'
        ' /opt/tf/train.py "$@"',
        "torchfleet",
    ]
    assert rendered.hostfile == "172.18.0.2\n172.18.0.3\n172.18.0.4\n"
    assert "TOKEN" not in rendered.command and rendered.display_env["TOKEN"] == lp.REDACTED


def test_hydra_takes_no_iface_when_the_nodes_name_theirs_differently():
    nodes = (Node("node1", "172.18.0.2", 2, "eth0"), Node("node2", "172.18.0.3", 2, "ens5"))
    rendered = render(make_plan(mode="mpich", mpich_launcher="hydra", nodes=nodes))
    assert "-iface" not in rendered.argv
    assert rendered.per_node_env["node2"] == {"GLOO_SOCKET_IFNAME": "ens5"}


@pytest.mark.parametrize("overrides, expected", [
    (dict(mode="mpich", mpich_launcher=None), "mpich mode needs to know which mpiexec it runs"),
    (dict(mode="mpich", mpich_launcher="intel"), "got mpich_launcher='intel'"),
    (dict(mpich_launcher="hydra"), "mpich_launcher applies to mpich mode only"),
    (dict(mode="mpich", mpich_launcher="hydra", mpirun_extra_args=("-iface", "eth1")), "'-iface' overrides"),
    (dict(mode="mpich", mpich_launcher="hydra", mpirun_extra_args=("-launcher", "fork")), "'-launcher' overrides"),
])
def test_the_mpich_flavour_is_never_guessed(overrides, expected):
    with pytest.raises(PlanError, match=re.escape(expected)):
        render(make_plan(**overrides))


def test_launcher_path_is_used():
    assert render(make_plan(launcher="/usr/lib64/openmpi/bin/mpirun")).argv[0] == \
        "/usr/lib64/openmpi/bin/mpirun"
    assert render(make_plan(mode="mpich", launcher="/opt/cray/pals/bin/mpiexec")).argv[0] == \
        "/opt/cray/pals/bin/mpiexec"


def test_network_cidr_is_preferred_for_open_mpi():
    rendered = render(make_plan(network="172.18.0.0/16"))
    argv = rendered.argv
    assert argv[argv.index("btl_tcp_if_include") + 1] == "172.18.0.0/16"
    assert argv[argv.index("oob_tcp_if_include") + 1] == "172.18.0.0/16"
    assert rendered.env["NCCL_SOCKET_IFNAME"] == "eth0"  # NCCL/Gloo need names, not a CIDR


def test_network_is_written_normalized():
    argv = render(make_plan(network="172.18.0.9/16")).argv
    assert argv[argv.index("btl_tcp_if_include") + 1] == "172.18.0.0/16"


def test_mixed_interface_names_are_joined_unique_and_gloo_picks_per_node():
    nodes = (node(1, interface="eth0"), node(2, interface="ens5"), node(3, interface="eth0"))
    rendered = render(make_plan(nodes=nodes))
    argv = rendered.argv
    assert argv[argv.index("btl_tcp_if_include") + 1] == "eth0,ens5"
    assert rendered.env["NCCL_SOCKET_IFNAME"] == "eth0,ens5"
    assert rendered.env["GLOO_SOCKET_IFNAME"] == "eth0,ens5"
    assert rendered.per_node_env == {"node1": {"GLOO_SOCKET_IFNAME": "eth0"},
                                     "node2": {"GLOO_SOCKET_IFNAME": "ens5"},
                                     "node3": {"GLOO_SOCKET_IFNAME": "eth0"}}
    assert "/sys/class/net/" in shell_tail(argv)[2]


def test_environment_goes_by_name_and_secrets_never_show():
    plan = make_plan(env_pass=("HF_HOME", "PATH", "HF_HOME"), env_secrets=("WANDB_API_KEY",),
                     env_set={"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "4"})
    rendered = render(plan)
    names = [rendered.argv[i + 1] for i, word in enumerate(rendered.argv) if word == "-x"]
    assert names == ["TORCHFLEET_RUN_ID", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_DEBUG",
                     "OMP_NUM_THREADS", "HF_HOME", "PATH", "WANDB_API_KEY"]
    # Values travel in mpirun's environment, not on its command line.
    assert "INFO" not in rendered.command and "NCCL_DEBUG=" not in rendered.command
    assert rendered.env["NCCL_DEBUG"] == "INFO"
    assert "WANDB_API_KEY" not in rendered.env and "HF_HOME" not in rendered.env
    assert rendered.inherit == ("HF_HOME", "PATH")
    assert rendered.secrets == ("WANDB_API_KEY",)
    assert rendered.display_env["WANDB_API_KEY"] == lp.REDACTED
    assert rendered.display_env["HF_HOME"] == lp.INHERITED
    assert rendered.display_env["NCCL_DEBUG"] == "INFO"


def test_mpich_mode_forwards_environment_with_envall():
    rendered = render(make_plan(mode="mpich", env_secrets=("WANDB_API_KEY",),
                                env_set={"NCCL_DEBUG": "INFO"}))
    assert "--envall" in rendered.argv
    assert "WANDB_API_KEY" not in rendered.command and "INFO" not in rendered.command
    assert rendered.env["NCCL_DEBUG"] == "INFO"
    assert rendered.secrets == ("WANDB_API_KEY",)


def test_log_dir_root_and_extra_args_go_before_the_program():
    rendered = render(make_plan(log_dir="/var/log/torchfleet/run-1", allow_run_as_root=True,
                                mpirun_extra_args=("--mca", "btl_tcp_links", "2", "--tag-output")))
    argv = rendered.argv
    sh = argv.index("/bin/sh")
    assert argv[sh - 8:sh] == ["--output-filename", "/var/log/torchfleet/run-1", "--tag-output",
                               "--allow-run-as-root", "--mca", "btl_tcp_links", "2", "--tag-output"]


@pytest.mark.parametrize("mode", ["torchrun", "rank"])
def test_open_mpi_starts_every_daemon_from_the_head_unless_told(mode):
    # Only the head holds the cluster key by default: no daemon may ssh on to another node.
    argv = render(make_plan(mode=mode)).argv
    at = argv.index("plm_rsh_no_tree_spawn")
    assert argv[at - 1:at + 2] == ["--mca", "plm_rsh_no_tree_spawn", "1"]
    assert "plm_rsh_no_tree_spawn" not in render(make_plan(mode=mode, tree_spawn=True)).argv


@pytest.mark.parametrize("mode", ["torchrun", "rank"])
def test_mpirun_rides_the_ssh_masters_the_caller_opened(mode):
    argv = render(make_plan(mode=mode, ssh_control_path="/tmp/tf-ssh-x/%C")).argv
    at = argv.index("plm_rsh_args")
    assert argv[at - 1:at + 2] == ["--mca", "plm_rsh_args", "-o ControlPath=/tmp/tf-ssh-x/%C"]
    assert "plm_rsh_args" not in render(make_plan(mode=mode)).argv
    # Ours, then: the user's own would be overridden.
    with pytest.raises(PlanError, match="overrides an MCA parameter torchfleet sets"):
        render(make_plan(mode=mode, ssh_control_path="/tmp/m/%C",
                         mpirun_extra_args=("--mca", "plm_rsh_args", "-p 2222")))
    assert "-p 2222" in render(make_plan(mode=mode, mpirun_extra_args=(
        "--mca", "plm_rsh_args", "-p 2222"))).argv


@pytest.mark.parametrize("seconds, idle, interval", [(120, 60, 20), (60, 30, 10), (20, 11, 3), (1, 1, 1)])
def test_silent_node_timeout_sets_open_mpis_keepalive(seconds, idle, interval):
    argv = render(make_plan(silent_node_timeout=seconds)).argv
    at = argv.index("oob_tcp_keepalive_time")
    assert argv[at - 1:at + 8] == ["--mca", "oob_tcp_keepalive_time", str(idle), "--mca", "oob_tcp_keepalive_intvl",
                                   str(interval), "--mca", "oob_tcp_keepalive_probes", "3"]
    if seconds >= 2 * lp.KEEPALIVE_PROBES:  # idle time plus the unanswered probes
        assert idle + lp.KEEPALIVE_PROBES * interval == seconds


@pytest.mark.parametrize("overrides", [dict(silent_node_timeout=0), dict(mode="mpich")])
def test_no_keepalive_with_silent_node_timeout_0_or_in_mpich_mode(overrides):
    assert not any(arg.startswith("oob_tcp_keepalive") for arg in render(make_plan(**overrides)).argv)


def test_own_keepalive_in_extra_args_is_allowed_with_silent_node_timeout_0():
    extra = ("--mca", "oob_tcp_keepalive_time", "5")
    argv = render(make_plan(silent_node_timeout=0, mpirun_extra_args=extra)).argv
    assert argv[argv.index("oob_tcp_keepalive_time") + 1] == "5"


def test_mpich_mode_has_no_tree_spawn_option():
    assert "plm_rsh_no_tree_spawn" not in render(make_plan(mode="mpich")).argv


@pytest.mark.parametrize("mode", ["torchrun", "mpich"])
def test_node_log_dir_keeps_worker_logs_and_tees_to_the_launcher(mode):
    script = shell_tail(render(make_plan(mode=mode, node_log_dir="/runs/r 1/workers")).argv)[2]
    # A directory per node: the node's rank, which the launcher gives it.
    assert " --log-dir='/runs/r 1/workers'/node\"${" in script
    assert "}\" --redirects=3 --tee=3 /opt/tf/train.py \"$@\"" in script
    assert "--log-dir" not in shell_tail(render(make_plan(mode=mode)).argv)[2]


def test_node_log_dir_on_one_node_too():
    rendered = render(make_plan(nodes=(node(1),), node_log_dir="/runs/w"))
    assert shell_tail(rendered.argv)[2] == (
        'exec torchrun --standalone --nnodes=1 --nproc-per-node=2 --log-dir=/runs/w/node"0" '
        '--redirects=3 --tee=3 /opt/tf/train.py "$@"')


def test_nproc_per_node_overrides_uneven_slots():
    nodes = (node(1, slots=8), node(2, slots=4))
    rendered = render(make_plan(nodes=nodes, nproc_per_node=4))
    assert "--nproc-per-node=4" in shell_tail(rendered.argv)[2]
    assert rendered.hostfile == "172.18.0.2 slots=8\n172.18.0.3 slots=4\n"
    assert rendered.world_size == 8


def test_plan_values_in_the_script_are_quoted():
    rendered = render(make_plan(script="/opt/my runs/train it.py", torchrun="/opt/env x/torchrun"))
    script = shell_tail(rendered.argv)[2]
    assert "'/opt/my runs/train it.py'" in script
    assert "exec '/opt/env x/torchrun'" in script


def test_command_is_the_shell_quoted_argv():
    rendered = render(make_plan(script_args=("a b", "$(x)")))
    assert shlex.split(rendered.command) == rendered.argv


def test_plan_accepts_lists_as_well_as_tuples():
    plan = make_plan(nodes=[node(1), node(2)], script_args=["x"], env_pass=["PATH"],
                     mpirun_extra_args=["--tag-output"])
    assert render(plan).argv[-1] == "x"


def test_render_is_deterministic():
    plan = make_plan(env_set={"B": "1", "A": "2"}, env_pass=("Z", "Y"))
    assert render(plan) == render(plan)


# ---------------------------------------------------------------------------------------------
# Validation: each problem names itself and the fix
# ---------------------------------------------------------------------------------------------

def test_plan_error_is_a_value_error():
    assert issubclass(PlanError, ValueError)


@pytest.mark.parametrize("overrides, expected", [
    (dict(nodes=()), "the plan has no nodes; add at least one host"),
    (dict(nodes=(node(1), node(1))), "node 'node1' is listed twice"),
    (dict(nodes=(node(1), Node("other", "172.18.0.2", 2, "eth0"))),
     "nodes 'node1' and 'other' share the address 172.18.0.2"),
    (dict(head="nodeX"), "head 'nodeX' is not one of the nodes (node1, node2, node3)"),
    (dict(mode="ssh"), "unknown mode 'ssh'; use one of: torchrun, rank, mpich"),
    (dict(port=80), "port 80 is not usable"),
    (dict(port=65536), "port 65536 is not usable"),
    (dict(port="29500"), "port '29500' is not usable"),
    (dict(port=True), "port True is not usable"),
    (dict(port=29500.0), "give an integer from 1024 to 65535"),
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
    (dict(mode="mpich", ssh_control_path="/tmp/m/%C"), "which mpich mode and tree_spawn do not use"),
    (dict(tree_spawn=True, ssh_control_path="/tmp/m/%C"), "which mpich mode and tree_spawn do not use"),
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


def test_module_is_pure_standard_library():
    """No I/O, no subprocess, no environment reads, no ansible: only these imports."""
    tree = ast.parse(Path(lp.__file__).read_text())
    imported = set()
    for item in ast.walk(tree):
        if isinstance(item, ast.Import):
            imported.update(alias.name for alias in item.names)
        elif isinstance(item, ast.ImportFrom):
            imported.add(item.module)
    assert imported <= {"__future__", "collections.abc", "dataclasses", "ipaddress", "re", "shlex",
                        "socket", "types"}
    names = {item.id for item in ast.walk(tree) if isinstance(item, ast.Name)}
    assert not names & {"open", "os", "subprocess", "print", "input", "eval", "exec"}


# ---------------------------------------------------------------------------------------------
# Quoting and exit codes, proven by running the rendered sh -c
# ---------------------------------------------------------------------------------------------

REPORTED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "TORCHFLEET_RUN_ID", "GLOO_SOCKET_IFNAME")

FAKE_PROGRAM = """#!{python}
# Stands in for torchrun/python: reports what it received, then exits as told.
import json, os, signal, sys
print(json.dumps({{"argv": sys.argv[1:],
                  "env": {{k: os.environ.get(k) for k in {names!r}}}}}))
sys.stdout.flush()
if os.environ.get("FAKE_SIGNAL"):
    os.kill(os.getpid(), int(os.environ["FAKE_SIGNAL"]))
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


@pytest.fixture
def fake_program(tmp_path):
    path = tmp_path / "fake bin" / "report"  # a space in the path: it must be quoted too
    path.parent.mkdir()
    path.write_text(FAKE_PROGRAM.format(python=sys.executable, names=REPORTED_ENV))
    path.chmod(0o755)
    return str(path)


def hostile_args(marker: Path) -> tuple[str, ...]:
    # Every payload, if it ever ran, only creates the marker file.
    return (
        f"$(touch {marker}); echo rm -rf ~",
        f'"; touch {marker}; echo "',
        f"'; touch {marker}; echo '",
        f"`touch {marker}`",
        f"; touch {marker}",
        f"&& touch {marker}",
        f"| touch {marker}",
        f"$(touch {marker})",
        "${HOME}", "$HOME", "*", "~", "", " ", "a b\tc", "line1\nline2", "--lr=1e-3", "-c",
        "\\", "'", '"', "ünïcødé", "--", "$@", "$0", "$1",
    )


def run_rank_shell(argv: list[str], env: dict[str, str], cwd: Path):
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
    return subprocess.run(shell_tail(argv), env=full_env, cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)


def test_torchrun_mode_user_args_arrive_byte_for_byte(tmp_path, fake_program):
    marker = tmp_path / "pwned"
    args = hostile_args(marker)
    script = f"/opt/my runs/$(touch {marker}).py"
    rendered = render(make_plan(torchrun=fake_program, script=script, script_args=args))
    result = run_rank_shell(rendered.argv, {**rendered.env, "OMPI_COMM_WORLD_RANK": "2"}, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["argv"] == [
        "--nnodes=3", "--node-rank=2", "--nproc-per-node=2", "--rdzv-backend=static",
        "--rdzv-endpoint=172.18.0.2:29500", "--rdzv-id=run-1", script, *args]
    assert report["env"]["TORCHFLEET_RUN_ID"] == "run-1"
    assert not marker.exists()
    assert list(tmp_path.iterdir()) == [Path(fake_program).parent]  # nothing else created


def test_one_node_standalone_runs(tmp_path, fake_program):
    rendered = render(make_plan(nodes=(node(1, slots=3),), torchrun=fake_program,
                                script_args=("x y",)))
    result = run_rank_shell(rendered.argv, rendered.env, tmp_path)  # no rank variable needed
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["argv"] == [
        "--standalone", "--nnodes=1", "--nproc-per-node=3", "/opt/tf/train.py", "x y"]


def test_rank_mode_maps_open_mpi_variables(tmp_path, fake_program):
    marker = tmp_path / "pwned"
    args = hostile_args(marker)
    nodes = (node(1, slots=4), node(2, slots=2))
    rendered = render(make_plan(mode="rank", nodes=nodes, python=fake_program, port=29611,
                                script_args=args))
    ompi = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    result = run_rank_shell(rendered.argv, {**rendered.env, **ompi}, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["argv"] == ["/opt/tf/train.py", *args]
    assert report["env"] == {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "6",
                             "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "172.18.0.2",
                             "MASTER_PORT": "29611", "TORCHFLEET_RUN_ID": "run-1",
                             "GLOO_SOCKET_IFNAME": "eth0"}
    assert not marker.exists()


@pytest.mark.parametrize("rank_env, expected_rank", [
    ({"PMI_RANK": "1"}, "1"),
    ({"PALS_RANKID": "2"}, "2"),
    ({"PMI_RANK": "0", "PALS_RANKID": "2"}, "0"),
])
def test_mpich_mode_takes_node_rank_from_pmi_or_pals(tmp_path, fake_program, rank_env,
                                                     expected_rank):
    marker = tmp_path / "pwned"
    args = hostile_args(marker)
    rendered = render(make_plan(mode="mpich", torchrun=fake_program, script_args=args))
    result = run_rank_shell(rendered.argv, {**rendered.env, **rank_env}, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["argv"][1] == f"--node-rank={expected_rank}"
    assert report["argv"][-len(args):] == list(args)
    assert not marker.exists()


@pytest.mark.parametrize("mode, program_field, expected", [
    ("torchrun", "torchrun", "OMPI_COMM_WORLD_RANK: not started by Open MPI mpirun"),
    ("rank", "python", "OMPI_COMM_WORLD_RANK: not started by Open MPI mpirun"),
    ("mpich", "torchrun", "PALS_RANKID: not started by mpiexec"),
])
def test_missing_rank_variable_fails_loudly(tmp_path, fake_program, mode, program_field, expected):
    rendered = render(make_plan(mode=mode, **{program_field: fake_program}))
    result = run_rank_shell(rendered.argv, rendered.env, tmp_path)
    assert result.returncode != 0
    assert result.stdout == ""  # the training program never started
    assert expected in result.stderr


@pytest.mark.parametrize("mode, program_field", [("torchrun", "torchrun"), ("rank", "python"),
                                                 ("mpich", "torchrun")])
def test_exit_code_passes_through(tmp_path, fake_program, mode, program_field):
    rendered = render(make_plan(mode=mode, **{program_field: fake_program}))
    env = {**rendered.env, "OMPI_COMM_WORLD_RANK": "0", "PMI_RANK": "0", "FAKE_EXIT": "7"}
    assert run_rank_shell(rendered.argv, env, tmp_path).returncode == 7


@pytest.mark.parametrize("mode, program_field", [("torchrun", "torchrun"), ("rank", "python")])
def test_death_by_signal_passes_through(tmp_path, fake_program, mode, program_field):
    """The wrapper execs, so the signal kills the process the launcher started: Python's
    subprocess reports it as -15; a shell parent (as the launcher's own wrapper would be) sees
    128+15. Never 0, never a flattened 1."""
    rendered = render(make_plan(mode=mode, **{program_field: fake_program}))
    env = {**rendered.env, "OMPI_COMM_WORLD_RANK": "0", "FAKE_SIGNAL": str(int(signal.SIGTERM))}
    direct = run_rank_shell(rendered.argv, env, tmp_path)
    assert direct.returncode == -signal.SIGTERM
    outer = subprocess.run([lp.SHELL, "-c", '"$@"; echo "status=$?"', "outer",
                            *shell_tail(rendered.argv)],
                           env={"PATH": os.environ.get("PATH", "/bin"), **env}, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60, check=False)
    assert outer.stdout.splitlines()[-1] == f"status={128 + signal.SIGTERM}"


@pytest.mark.skipif(not Path("/sys/class/net/lo").exists(), reason="needs Linux /sys/class/net")
def test_gloo_keeps_the_first_listed_interface_the_node_has(tmp_path, fake_program):
    # With mixed names the rendered env lists them all; each node keeps one it really has.
    # `lo` stands in for "an interface this machine has" (the plan itself never allows lo).
    nodes = (node(1, interface="eth0"), node(2, interface="ens5"))
    rendered = render(make_plan(nodes=nodes, torchrun=fake_program))
    env = {**rendered.env, "OMPI_COMM_WORLD_RANK": "1",
           "GLOO_SOCKET_IFNAME": "nosuchnic0,lo,nosuchnic1"}
    result = run_rank_shell(rendered.argv, env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["env"]["GLOO_SOCKET_IFNAME"] == "lo"


# ---------------------------------------------------------------------------------------------
# Golden files: whole rendered launches for a few inventories
# ---------------------------------------------------------------------------------------------

GOLDEN_PLANS = {
    "torchrun_three_nodes": Plan(
        nodes=(Node("gpu-b", "172.18.0.3", 8, "eth0"), Node("gpu-a", "172.18.0.2", 8, "eth0"),
               Node("gpu-c", "172.18.0.4", 8, "eth0")),
        head="gpu-a", script="/srv/train/ddp.py",
        script_args=("--epochs", "10", "--name", "first run; $(echo hi)"),
        run_id="ddp-20240828.1", hostfile_path="/home/train/.torchfleet/runs/ddp-20240828.1/hosts",
        torchrun="/opt/torchfleet/env/bin/torchrun", network="172.18.0.0/16",
        log_dir="/home/train/.torchfleet/runs/ddp-20240828.1/logs",
        node_log_dir="/home/train/.torchfleet/runs/ddp-20240828.1/workers",
        env_pass=("HF_HOME",), env_secrets=("WANDB_API_KEY", "HF_TOKEN"),
        env_set={"NCCL_DEBUG": "WARN"}, mpirun_extra_args=("--mca", "btl_tcp_links", "2"),
    ),
    "rank_uneven_mixed_nics": Plan(
        nodes=(Node("head", "10.0.0.1", 4, "eth0"), Node("w1", "10.0.0.2", 2, "ens5")),
        head="head", mode="rank", script="/srv/train/mpi_ddp.py", script_args=("--batch", "64"),
        run_id="rank-run", hostfile_path="/tmp/torchfleet/rank-run/hosts", port=29511,
        python="/opt/torchfleet/env/bin/python", allow_run_as_root=True, tree_spawn=True,
    ),
    "mpich_pals_two_nodes": Plan(
        nodes=(Node("dec0001", "10.140.0.11", 4, "hsn0"), Node("dec0002", "10.140.0.12", 4, "hsn0")),
        head="dec0001", mode="mpich", script="tutorials/print_hostinfo.py", run_id="pals-1",
        hostfile_path="/glade/work/u/.torchfleet/pals-1/hosts",
        torchrun="/glade/work/u/env/bin/torchrun", launcher="/opt/cray/pals/1.2/bin/mpiexec",
        env_pass=("LD_LIBRARY_PATH",), node_log_dir="/glade/work/u/.torchfleet/pals-1/workers",
        mpich_launcher="pals",
    ),
    "mpich_hydra_three_nodes": Plan(
        nodes=(Node("n0", "10.1.0.10", 2, "ib0"), Node("n1", "10.1.0.11", 2, "ib0"),
               Node("n2", "10.1.0.12", 2, "ib0")),
        head="n0", mode="mpich", mpich_launcher="hydra", script="/home/u/train.py",
        script_args=("--epochs", "2"), run_id="hydra-1", hostfile_path="/home/u/runs/hydra-1/hostfile",
        torchrun="/opt/torchfleet/envs/torchfleet/bin/torchrun", launcher="/usr/bin/mpiexec.hydra",
        env_secrets=("WANDB_API_KEY",), node_log_dir="/home/u/runs/hydra-1/workers",
    ),
}


def golden_view(rendered) -> dict:
    return {"command": rendered.command, "argv": rendered.argv, "hostfile": rendered.hostfile,
            "env": rendered.env, "display_env": rendered.display_env,
            "per_node_env": rendered.per_node_env, "nodes": list(rendered.nodes),
            "world_size": rendered.world_size}


@pytest.mark.parametrize("name", sorted(GOLDEN_PLANS))
def test_golden(name):
    path = GOLDEN / f"{name}.json"
    actual = golden_view(render(GOLDEN_PLANS[name]))
    if os.environ.get("TORCHFLEET_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(actual, indent=2, ensure_ascii=False) + "\n")
    assert path.exists(), f"missing {path}; create it with TORCHFLEET_UPDATE_GOLDEN=1"
    assert actual == json.loads(path.read_text())


def test_golden_files_hold_no_secret_values():
    for path in GOLDEN.glob("*.json"):
        data = json.loads(path.read_text())
        for secret in ("WANDB_API_KEY", "HF_TOKEN"):
            assert data["display_env"].get(secret, lp.REDACTED) == lp.REDACTED
            assert secret not in data["env"]


# ---------------------------------------------------------------------------------------------
# Scale
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", lp.MODES)
def test_ten_thousand_nodes_render(mode):
    nodes = tuple(Node(f"n{i:05d}", f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", 8, "eth0")
                  for i in range(1, 10001))
    rendered = render(make_plan(mode=mode, nodes=nodes, head="n05000", network="10.0.0.0/8"))
    lines = rendered.hostfile.splitlines()
    assert len(lines) == 10000
    assert lines[0].split()[0] == "10.0.19.136"  # the head, n05000
    assert rendered.world_size == 80000
    assert len(rendered.argv) < 60  # the command does not grow with the cluster


# ---------------------------------------------------------------------------------------------
# Real Open MPI on this machine, when present
# ---------------------------------------------------------------------------------------------

def _local_address() -> str | None:
    # A UDP "connect" sends nothing; it only asks the kernel which source address it would use.
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("192.0.2.254", 9))
            address = sock.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


# `make test` installs Open MPI on the controller: this test runs, it is never skipped.
@pytest.mark.parametrize("mode, program_field, expected_ranks", [("rank", "python", 2),
                                                                 ("torchrun", "torchrun", 1)])
def test_real_mpirun_accepts_the_rendered_command(tmp_path, fake_program, mode, program_field,
                                                  expected_ranks):
    assert shutil.which("mpirun"), "Open MPI's mpirun is needed: apt-get install openmpi-bin"
    address = _local_address()
    assert address, "this test needs a non-loopback IPv4 address on this machine"
    marker = tmp_path / "pwned"
    args = ("a b", f"$(touch {marker})", '"; echo x')
    plan = make_plan(mode=mode, nodes=(Node("here", address, 2),), head="here",
                     network=f"{address}/32", hostfile_path=str(tmp_path / "hostfile"),
                     script_args=args, allow_run_as_root=os.geteuid() == 0,
                     **{program_field: fake_program})
    rendered = render(plan)
    Path(plan.hostfile_path).write_text(rendered.hostfile)
    env = {**os.environ, **rendered.env}
    result = subprocess.run(rendered.argv, env=env, cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    # Open MPI forwards each rank's writes as they come: one rank's newline can land after the
    # next rank's line, so read whole JSON objects rather than lines.
    decoder, reports, at = json.JSONDecoder(), [], result.stdout.find("{")
    while at != -1:
        report, end = decoder.raw_decode(result.stdout, at)
        reports.append(report)
        at = result.stdout.find("{", end)
    assert len(reports) == expected_ranks
    for report in reports:
        assert report["argv"][-3:] == list(args)
        assert report["env"]["TORCHFLEET_RUN_ID"] == "run-1"
    if mode == "rank":
        assert sorted(r["env"]["RANK"] for r in reports) == ["0", "1"]
        assert {r["env"]["WORLD_SIZE"] for r in reports} == {"2"}
        assert {r["env"]["MASTER_ADDR"] for r in reports} == {address}
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# Run ids
# ---------------------------------------------------------------------------------------------

def test_new_run_id_shape_and_renderer_accepts_it():
    run_id = new_run_id(datetime(2026, 11, 21, 10, 15, 2), "ab12cd")
    assert run_id == "tf-20261121-101502-ab12cd"
    plan = Plan(nodes=(Node("a", "10.0.0.1", 1),), head="a", script="t.py", run_id=run_id,
                hostfile_path="/tmp/h")
    assert render(plan).env["TORCHFLEET_RUN_ID"] == run_id


@pytest.mark.parametrize("run_id", ["", "has space", "../etc", "a/b", "x" * 65])
def test_user_run_ids_follow_the_renderer_rule(run_id):
    # A run id names a directory: the renderer's rule keeps '/' and '..' paths out.
    with pytest.raises(PlanError, match="run_id"):
        render(Plan(nodes=(Node("a", "10.0.0.1", 1),), head="a", script="t.py", run_id=run_id,
                    hostfile_path="/tmp/h"))


def test_a_plan_survives_its_json_form_for_a_restart():
    from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_plan as lp
    plan = lp.Plan(nodes=(lp.Node("a", "10.0.0.1", 2, "eth0"), lp.Node("b", "10.0.0.2", 2, "eth0")), head="a",
                   script="/s/train.py", run_id="tf-1", hostfile_path="/r/hostfile", script_args=("--x", "1"),
                   env_set={"A": "1"}, env_pass=("PATH",), mpirun_extra_args=("--mca", "x", "y"))
    again = lp.plan_from_dict(json.loads(json.dumps(lp.plan_to_dict(plan))))
    assert again == plan and lp.render(again).argv == lp.render(plan).argv
