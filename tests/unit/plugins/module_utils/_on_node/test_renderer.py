"""Unit tests for plugins/module_utils/_on_node/renderer.py, the one launch renderer: the shapes of the
rendered command, whole rendered launches (golden files) and scale. Running the rendered sh -c for
real: test_renderer_shell.py; the checks: test_plan_checks.py.

Golden files live in tests/unit/plugins/module_utils/_on_node/golden/; regenerate them after an
intended change with
    TORCHFLEET_UPDATE_GOLDEN=1 python -m pytest tests/unit/plugins/module_utils/_on_node/test_renderer.py
and review the diff.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
from plan_helpers import HOSTFILE, make_plan, node, plan_of, shell_tail

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import launch_plan as lp
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import launchers
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import Node, PlanError
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.renderer import render

GOLDEN = Path(__file__).parent / "golden"


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


@pytest.mark.parametrize("mode", ["torchrun", "rank", "mpich"])
def test_bind_to_reaches_the_launchers_own_flag(mode):
    hydra = {"mpich_launcher": "hydra"} if mode == "mpich" else {}
    argv = render(make_plan(mode=mode, bind_to="numa", **hydra)).argv
    flag = "-bind-to" if mode == "mpich" else "--bind-to"
    assert argv[argv.index(flag) + 1] == "numa" and argv.count(flag) == 1
    assert render(make_plan(mode=mode, **hydra)).argv[argv.index(flag) + 1] == "none"  # the default, as before


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


# What each node's sh runs in mpich mode, with either mpiexec (PALS or Hydra).
MPICH_SCRIPT = ('exec /opt/env/bin/torchrun --nnodes=3'
                ' --node-rank="${PMI_RANK:-${PALS_RANKID:?not started by mpiexec}}" --nproc-per-node=2'
                ' --rdzv-backend=static --rdzv-endpoint=172.18.0.2:29500 --rdzv-id=run-1'
                ' /opt/tf/train.py "$@"')


def test_mpich_mode_exact_argv():
    rendered = render(make_plan(mode="mpich", torchrun="/opt/env/bin/torchrun"))
    assert rendered.argv == [
        "mpiexec", "-n", "3", "--ppn", "1", "--cpu-bind", "none", "--hostfile", HOSTFILE,
        "--envall", "/bin/sh", "-c",
        MPICH_SCRIPT,
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
        MPICH_SCRIPT,
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
    (dict(mode="mpich", mpich_launcher="intel"), "mpich_launcher is 'intel': give hydra"),
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
    if seconds >= 2 * launchers.KEEPALIVE_PROBES:  # idle time plus the unanswered probes
        assert idle + launchers.KEEPALIVE_PROBES * interval == seconds


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
# Golden files: whole rendered launches for a few inventories
# ---------------------------------------------------------------------------------------------

GOLDEN_PLANS = {
    "torchrun_three_nodes": plan_of(
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
    "rank_uneven_mixed_nics": plan_of(
        nodes=(Node("head", "10.0.0.1", 4, "eth0"), Node("w1", "10.0.0.2", 2, "ens5")),
        head="head", mode="rank", script="/srv/train/mpi_ddp.py", script_args=("--batch", "64"),
        run_id="rank-run", hostfile_path="/tmp/torchfleet/rank-run/hosts", port=29511,
        python="/opt/torchfleet/env/bin/python", allow_run_as_root=True, tree_spawn=True,
    ),
    "mpich_pals_two_nodes": plan_of(
        nodes=(Node("dec0001", "10.140.0.11", 4, "hsn0"), Node("dec0002", "10.140.0.12", 4, "hsn0")),
        head="dec0001", mode="mpich", script="tutorials/print_hostinfo.py", run_id="pals-1",
        hostfile_path="/glade/work/u/.torchfleet/pals-1/hosts",
        torchrun="/glade/work/u/env/bin/torchrun", launcher="/opt/cray/pals/1.2/bin/mpiexec",
        env_pass=("LD_LIBRARY_PATH",), node_log_dir="/glade/work/u/.torchfleet/pals-1/workers",
        mpich_launcher="pals",
    ),
    "mpich_hydra_three_nodes": plan_of(
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
# fault_tolerance torchft: the Lighthouse and one replica group a node
# ---------------------------------------------------------------------------------------------

def test_torchft_renders_the_lighthouse_and_one_standalone_torchrun_a_node():
    rendered = render(make_plan(fault_tolerance="torchft", torchrun="/env/bin/torchrun", min_nodes=2,
                                torchft_heartbeat_ms=750, node_log_dir="/runs/run-1/workers",
                                script_args=["--steps", "a b"]))
    assert rendered.argv == ["/env/bin/torchft_lighthouse", "--min_replicas", "2", "--bind", "0.0.0.0:29500",
                             "--heartbeat_timeout_ms", "750"]
    assert list(rendered.groups) == ["node1", "node2", "node3"]
    assert rendered.hostfile == ""  # no mpirun: nothing reads one
    argv = rendered.groups["node2"]
    assert argv[:2] == [lp.SHELL, "-c"] and argv[3:] == [lp.SHELL_NAME, "--steps", "a b"]
    script = argv[2]
    # Its variables come on stdin first (nothing of them on a command line); a torchrun of its own.
    assert script.startswith('eval "$(cat)"; ')
    assert "--standalone --nnodes=1 --nproc-per-node=2" in script and "--rdzv" not in script
    assert '--log-dir=/runs/run-1/workers/node"$REPLICA_GROUP_ID"' in script
    assert rendered.env["TORCHFT_LIGHTHOUSE"] == "http://172.18.0.2:29500"
    assert rendered.env["NUM_REPLICA_GROUPS"] == "3"
    assert {name: env["REPLICA_GROUP_ID"] for name, env in rendered.per_node_env.items()} == \
        {"node1": "0", "node2": "1", "node3": "2"}
    assert rendered.world_size == 6
    assert rendered.command.splitlines()[0] == shlex.join(rendered.argv)
    assert rendered.command.splitlines()[2] == "[node2] " + shlex.join(argv)


def test_torchft_lighthouse_binds_ipv6_where_the_head_has_it_and_sits_beside_a_bare_torchrun():
    nodes = (Node("a", "fd00::1", 1, "eth0"), Node("b", "fd00::2", 1, "eth0"))
    rendered = render(make_plan(fault_tolerance="torchft", nodes=nodes, head="a", port=29999))
    assert rendered.argv[:5] == ["torchft_lighthouse", "--min_replicas", "1", "--bind", "[::]:29999"]
    assert rendered.env["TORCHFT_LIGHTHOUSE"] == "http://[fd00::1]:29999"


def test_fault_tolerance_none_renders_as_before():
    assert render(make_plan(fault_tolerance="none")) == render(make_plan())
