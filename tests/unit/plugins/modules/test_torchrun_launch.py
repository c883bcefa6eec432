"""Unit tests for the pure parts of plugins/modules/torchrun_launch.py.

The launcher logs in tests/unit/plugins/modules/captured/ are real: each is the launcher.log the module wrote for a
run on one node (Open MPI 4.1.4, torch 2.13 CPU), except torchrun_two_failures.log, which is
torchrun's own output with two workers failing (no mpirun), and torchrun_lost_daemon.log, from three
containers of the local cluster whose third node's Open MPI daemon was killed mid-run. Other
multi-node logs are built here from those real blocks, and say so.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_plan import (
    RESERVED_ENV,
    Node,
    Plan,
    PlanError,
    new_run_id,
    render,
)
from ansible_collections.torchfleet.cluster.plugins.module_utils import _head, _launch_start as start
from ansible_collections.torchfleet.cluster.plugins.module_utils._head import fanout, supervisor, transitions
from ansible_collections.torchfleet.cluster.plugins.module_utils._head.record import (
    PLAN_FILE,
    SupervisorPlan,
    read_state,
)
from ansible_collections.torchfleet.cluster.plugins.module_utils._head import probe as node_probe
from ansible_collections.torchfleet.cluster.plugins.modules import torchrun_launch as tl
from ansible_collections.torchfleet.cluster.plugins.module_utils._head import report

CAPTURED = Path(__file__).parent / "captured"


def captured(name: str) -> str:
    return (CAPTURED / name).read_text()


# ---------------------------------------------------------------------------------------------
# Exit codes
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("returncode, status", [(0, 0), (1, 1), (3, 3), (137, 137),
                                                (-9, 137), (-15, 143), (-2, 130)])
def test_death_by_signal_is_128_plus_n_never_zero(returncode, status):
    assert report.exit_status(returncode) == status


def test_signal_names():
    assert report.signal_name(137) == "SIGKILL"
    assert report.signal_name(143) == "SIGTERM"
    assert report.signal_name(3) is None
    assert report.signal_name(128) is None


# ---------------------------------------------------------------------------------------------
# torchrun's failure summary
# ---------------------------------------------------------------------------------------------

def test_torchrun_summary_worker_exit_code():
    failures = report.parse_torchrun_failures(captured("torchrun_exit3.log"))
    assert [{key: failure[key] for key in ("time", "host", "rank", "local_rank", "exit_code")}
            for failure in failures] == [{"time": "2026-11-21_06:46:47", "host": "localhost", "rank": 1,
                                          "local_rank": 1, "exit_code": 3}]


def test_torchrun_summary_worker_killed_by_signal():
    # torchrun prints "exitcode  : -9 (pid: N)  (SIGKILL)"; reported the shell way: 137.
    failure = report.first_torchrun_failure(captured("torchrun_signal9.log"))
    assert failure["rank"] == 0 and failure["local_rank"] == 0
    assert failure["exit_code"] == 128 + signal.SIGKILL


def test_torchrun_summary_takes_the_root_cause_not_the_other_failures():
    # Rank 1 exited 11 first; rank 0 was then terminated by torchrun (-15) and is listed under
    # "Failures:", not as the root cause.
    failures = report.parse_torchrun_failures(captured("torchrun_two_failures.log"))
    assert [(f["rank"], f["exit_code"]) for f in failures] == [(1, 11)]


def _as_node(text: str, host: str, time: str, rank: int) -> str:
    """A real summary block, moved to another host, time and rank (as another node prints it)."""
    text = re.sub(r"host      : \S+", f"host      : {host}", text)
    text = re.sub(r"time      : \S+", f"time      : {time}", text)
    return re.sub(r"rank      : \d+ \(local_rank: (\d+)\)", rf"rank      : {rank} (local_rank: \1)",
                  text)


def _tagged(text: str, node: int) -> list[str]:
    """A node's torchrun lines as Open MPI's --tag-output forwards them into launcher.log."""
    return [f"[1,{node}]<stderr>:{line}" for line in text.splitlines()]


def test_first_failure_across_nodes_is_the_one_the_head_learned_of_first_whatever_their_clocks():
    # Built from real blocks: node 1's torchrun noticed its worker's failure first (its lines
    # reach the launcher log first), node 0 a moment later; node 1's clock runs 8 s ahead, so
    # its own times say it failed last. The launcher interleaves the two nodes' lines.
    block = captured("torchrun_exit3.log")
    first = _tagged(_as_node(block, "gpu02", "2026-11-21_06:46:58", 3), 1)
    second = _tagged(_as_node(block, "gpu03", "2026-11-21_06:46:50", 5), 0)
    noticed = next(i for i, line in enumerate(first) if "failed (exitcode:" in line)
    text = "\n".join(first[:noticed + 1] + second + first[noticed + 1:])
    assert [f["host"] for f in report.parse_torchrun_failures(text)] == ["gpu03", "gpu02"]  # as printed
    found = report.first_torchrun_failure(text)
    assert (found["host"], found["rank"], found["exit_code"]) == ("gpu02", 3, 3)


def test_summary_lines_with_an_output_tag_still_parse():
    # mpirun --tag-output (allowed in mpirun_extra_args) prefixes every forwarded line.
    lines = captured("torchrun_exit3.log").splitlines()
    tagged = "\n".join(f"[1,0]<stderr>:{line}" for line in lines)
    assert report.first_torchrun_failure(tagged)["rank"] == 1


def test_no_summary_no_failure():
    assert report.first_torchrun_failure(captured("rank_exit3.log")) is None
    assert report.first_torchrun_failure("") is None


# ---------------------------------------------------------------------------------------------
# Open MPI's report
# ---------------------------------------------------------------------------------------------

def test_open_mpi_rank_exit_code():
    assert report.parse_mpirun_failure(captured("rank_exit3.log")) == {
        "rank": 1, "host": None, "exit_code": 3}


def test_open_mpi_rank_killed_by_signal():
    assert report.parse_mpirun_failure(captured("rank_signal9.log")) == {
        "rank": 1, "host": "vm", "exit_code": 137}


def test_open_mpi_names_the_torchrun_process_in_torchrun_mode():
    # In torchrun mode the MPI process is the node's torchrun, which exits 1 for any failure.
    assert report.parse_mpirun_failure(captured("torchrun_exit3.log")) == {
        "rank": 0, "host": None, "exit_code": 1}


def test_hydra_names_the_node_and_a_signal_as_128_plus_n():
    # Hydra's EXIT CODE for a signal is the signal's number; its EXIT STRING says it was one.
    assert report.parse_hydra_failure(captured("hydra_signal15.log")) == {"host": "localhost", "exit_code": 143}
    # Without the EXIT STRING (mpiexec aborted first), the code is all there is.
    assert report.parse_hydra_failure(captured("hydra_torchrun_killed.log")) == {
        "host": "172.18.0.3", "exit_code": 9}
    assert report.parse_hydra_failure(captured("rank_signal9.log")) is None


def test_hydra_failure_is_told_by_the_node_it_names(tmp_path):
    nodes = [Node("n0", "172.18.0.2", 2, "eth0"), Node("n1", "172.18.0.3", 2, "eth0")]
    failure = report.describe_failure(captured("hydra_torchrun_killed.log"), nodes, "mpich", _paths(tmp_path))
    assert (failure["failed_rank"], failure["failed_host"], failure["failed_exit_code"]) == (None, "n1", 9)
    # Hydra's tag is not Open MPI's: the tail shows the lines as written.
    assert failure["failed_log_tail"][-1].startswith("[mpiexec@node0] main")


def test_success_has_no_failure():
    assert report.parse_mpirun_failure("RANK 0 WORLD_SIZE 2\nRANK 1 WORLD_SIZE 2\n") is None


NODES = [Node("head", "10.0.0.1", 4), Node("w1", "10.0.0.2", 2), Node("w2", "10.0.0.3", 2)]


@pytest.mark.parametrize("rank, mode, expected", [
    (0, "rank", "head"), (3, "rank", "head"), (4, "rank", "w1"), (5, "rank", "w1"),
    (7, "rank", "w2"), (8, "rank", None),
    (0, "torchrun", "head"), (2, "torchrun", "w2"), (3, "torchrun", None), (1, "mpich", "w1"),
])
def test_rank_to_node(rank, mode, expected):
    assert report.rank_node(rank, NODES, mode) == expected


# ---------------------------------------------------------------------------------------------
# What the module reports, from a run directory laid out as Open MPI and torchrun leave it
# ---------------------------------------------------------------------------------------------

def _paths(tmp_path):
    return {"run": str(tmp_path), "launcher": str(tmp_path / "launcher.log"),
            "ranks": str(tmp_path / "ranks"), "workers": str(tmp_path / "workers")}


def test_rank_mode_failure_on_the_head_reads_the_ranks_file(tmp_path):
    rank_dir = tmp_path / "ranks" / "1" / "rank.1"
    rank_dir.mkdir(parents=True)
    (rank_dir / "stderr").write_text("Traceback ...\nValueError: bad batch\n")
    nodes = [Node("here", "10.0.0.1", 2)]
    failure = report.describe_failure(captured("rank_exit3.log"), nodes, "rank", _paths(tmp_path))
    assert failure == {"failed_rank": 1, "failed_host": "here", "failed_exit_code": 3,
                       "failed_log": str(rank_dir / "stderr"),
                       "failed_log_tail": ["Traceback ...", "ValueError: bad batch"]}
    message = report.failure_message("r1", 3, failure, _paths(tmp_path))
    assert "rank 1 on here exited with code 3 first" in message
    assert str(rank_dir / "stderr") in message and str(tmp_path / "launcher.log") in message


def test_rank_mode_failure_elsewhere_points_at_that_node(tmp_path):
    # Rank 1 of a 1+1 slot plan ran on w1: its file is there, the tail comes from the launcher.
    nodes = [Node("head", "10.0.0.1", 1), Node("w1", "10.0.0.2", 1)]
    text = captured("rank_signal9.log")
    failure = report.describe_failure(text, nodes, "rank", _paths(tmp_path))
    assert failure["failed_host"] == "w1"
    assert failure["failed_exit_code"] == 137
    assert failure["failed_log"] == f"{tmp_path}/ranks/*/rank.1/stderr"
    assert failure["failed_log_tail"] == text.splitlines()[-20:]
    message = report.failure_message("r1", 137, failure, _paths(tmp_path))
    assert "rank 1 on w1 was killed by SIGKILL (exit code 137) first" in message


def test_empty_rank_log_falls_back_to_the_launcher_log(tmp_path):
    # A rank killed by SIGKILL often wrote nothing to stderr.
    rank_dir = tmp_path / "ranks" / "1" / "rank.1"
    rank_dir.mkdir(parents=True)
    (rank_dir / "stderr").write_text("")
    text = captured("rank_signal9.log")
    failure = report.describe_failure(text, [Node("here", "10.0.0.1", 2)], "rank", _paths(tmp_path))
    assert failure["failed_log"] == str(rank_dir / "stderr")
    assert failure["failed_log_tail"] == text.splitlines()[-20:]


def test_torchrun_failure_reads_the_worker_log(tmp_path):
    worker = tmp_path / "workers" / "node0" / "ed36-rdzv_v0rb" / "attempt_0" / "1"
    worker.mkdir(parents=True)
    (worker / "stderr.log").write_text("rank failing\n")
    nodes = [Node("here", "10.0.0.1", 2)]
    failure = report.describe_failure(captured("torchrun_exit3.log"), nodes, "torchrun",
                                      _paths(tmp_path))
    assert failure == {"failed_rank": 1, "failed_host": "here", "failed_exit_code": 3,
                       "failed_log": str(worker / "stderr.log"),
                       "failed_log_tail": ["rank failing"]}


def test_a_failing_rank_on_another_node_is_quoted_from_its_own_log(tmp_path):
    # Three nodes, one worker each: torchrun's summary names global rank 2 (local rank 0), on the
    # third node. Its log is asked of that node, by its pattern; the answer is a resolved path and
    # that rank's own last lines (Open MPI's tags taken off), not the launcher log's tail.
    text = captured("torchrun_exit3.log").replace("rank      : 1 (local_rank: 1)", "rank      : 2 (local_rank: 0)")
    asked = []

    def read_log(host, pattern):
        asked.append((host, pattern))
        return "/runs/r/workers/r_x/attempt_0/0/stderr.log", [
            "[1,2]<stderr>:ModuleNotFoundError: No module named 'sympy'"]
    nodes = [Node("n0", "10.0.0.1", 1), Node("n1", "10.0.0.2", 1), Node("n2", "10.0.0.3", 1)]
    failure = report.describe_failure(text, nodes, "torchrun", _paths(tmp_path), nproc=1, read_log=read_log)
    assert asked == [("n2", f"{tmp_path}/workers/node2/*/attempt_*/0/stderr.log")]
    assert failure == {"failed_rank": 2, "failed_host": "n2", "failed_exit_code": 3,
                       "failed_log": "/runs/r/workers/r_x/attempt_0/0/stderr.log",
                       "failed_log_tail": ["ModuleNotFoundError: No module named 'sympy'"]}


def test_a_failing_rank_with_nothing_on_stderr_is_quoted_from_its_stdout(tmp_path):
    logs = {"stdout": (f"{tmp_path}/ranks/1/rank.1/stdout", ["[1,1]<stdout>:about to fail"])}

    def read_log(host, pattern):
        return logs.get(pattern.rsplit("/", 1)[1], (None, []))
    failure = report.describe_failure(captured("rank_exit3.log"), [Node("here", "10.0.0.1", 2)], "rank",
                                      _paths(tmp_path), read_log=read_log)
    assert failure["failed_log"] == f"{tmp_path}/ranks/1/rank.1/stdout"
    assert failure["failed_log_tail"] == ["about to fail"]


def test_torchrun_launcher_failure_without_summary_names_the_node(tmp_path):
    # torchrun itself failed (say, rendezvous timed out): Open MPI names the MPI process, which
    # is a node; there is no worker rank.
    text = captured("torchrun_exit3.log").split("torch.distributed.elastic")[0] + \
        captured("torchrun_exit3.log")[captured("torchrun_exit3.log").index("-----"):]
    text = text.replace("Root Cause", "")
    failure = report.describe_failure(text, NODES, "torchrun", _paths(tmp_path))
    assert (failure["failed_rank"], failure["failed_host"], failure["failed_exit_code"]) == (
        None, "head", 1)
    assert "the launcher on head exited with code 1" in report.failure_message(
        "r", 1, failure, _paths(tmp_path))


def test_unexplained_failure_says_where_to_look(tmp_path):
    failure = report.describe_failure("ssh: connect to host 10.0.0.2 port 22: No route to host\n",
                                      NODES, "rank", _paths(tmp_path))
    assert failure["failed_rank"] is None and failure["failed_exit_code"] is None
    message = report.failure_message("r", 1, failure, _paths(tmp_path))
    assert "exited with rc 1 without naming a failed rank" in message
    assert str(tmp_path / "launcher.log") in message


# The run of torchrun_lost_daemon.log: Open MPI names the node by its hostfile address.
LOCAL_NODES = [Node("tf-tffault-node0", "172.19.0.2", 1), Node("tf-tffault-node1", "172.19.0.3", 1),
               Node("tf-tffault-node2", "172.19.0.4", 1)]


def test_open_mpi_lost_daemon_names_the_node():
    text = captured("torchrun_lost_daemon.log")
    assert report.parse_lost_daemon(text) == "172.19.0.4"
    # Nothing else in that log names a failure: no rank failed, the node's daemon went away.
    assert report.parse_mpirun_failure(text) is None and report.first_torchrun_failure(text) is None
    assert report.parse_lost_daemon(captured("torchrun_signal9.log")) is None


def test_lost_daemon_is_reported_as_that_node(tmp_path):
    failure = report.describe_failure(captured("torchrun_lost_daemon.log"), LOCAL_NODES, "torchrun",
                                      _paths(tmp_path), 1)
    assert (failure["failed_rank"], failure["failed_host"], failure["failed_exit_code"]) == (
        None, "tf-tffault-node2", None)
    message = report.failure_message("r", 205, failure, _paths(tmp_path))
    assert "Open MPI lost contact with its daemon on tf-tffault-node2" in message
    assert "without naming a failed rank" not in message


def test_a_lost_node_outside_the_plan_keeps_the_name_open_mpi_printed():
    assert report.node_named("172.19.0.9", LOCAL_NODES) == "172.19.0.9"
    assert report.node_named("tf-tffault-node1", LOCAL_NODES) == "tf-tffault-node1"


def test_the_clean_up_after_a_failed_run_names_what_it_ended_and_the_silent_nodes(tmp_path):
    # A stand-in for ssh: w1 had two processes of the run left, w2 is cut off (the message ssh
    # printed for a node disconnected from the local cluster's network), w3 never answers; the
    # head swept itself and is not asked.
    fake = tmp_path / "ssh"
    request = tmp_path / "request"
    fake.write_text('#!/bin/sh\n'
                    f'cat > {request}\n'
                    'case "$*" in\n'
                    '  *10.0.0.1*) exit 99 ;;\n'
                    '  *10.0.0.2*) echo \'{"stopped": [{"pid": 41}, {"pid": 42}], "survivors": []}\' ;;\n'
                    '  *10.0.0.3*) echo "ssh: connect to host 10.0.0.3 port 22: No route to host" >&2\n'
                    '              exit 255 ;;\n'
                    '  *10.0.0.4*) exec sleep 30 ;;\n'
                    'esac\n')
    fake.chmod(0o755)
    nodes = NODES + [Node("w3", "10.0.0.4", 2)]
    started = time.monotonic()
    ended = fanout.end_run_on_nodes(nodes, "head", str(fake), "python3", "r1", grace=3, timeout=2)
    assert time.monotonic() - started < 10  # bounded by `timeout`, not by the hung node
    assert json.loads(request.read_text()) == {"stop": {"run_id": "r1", "grace": 3}}
    assert ended == {
        "stopped": {"w1": [41, 42]}, "survivors": {},
        "silent": [{"name": "w2", "address": "10.0.0.3",
                    "error": "ssh: connect to host 10.0.0.3 port 22: No route to host"},
                   {"name": "w3", "address": "10.0.0.4", "error": "no answer within 2 s"}]}
    said = report.cleanup_message(ended)
    assert said.startswith("; could not reach w2, w3 to end what is left of the run there")
    assert "launch.yml -e launch_action=stop" in said
    assert report.cleanup_message(ended, name_silent=False) == ""  # a timeout's message names them
    assert "survived SIGKILL on w1: 41" in report.cleanup_message(
        {"stopped": {}, "survivors": {"w1": [41]}, "silent": []})


class _Module:
    """The little of AnsibleModule that ssh_masters reads."""
    def __init__(self, check_mode=False, **params):
        self.check_mode = check_mode
        self.params = {"check_nodes": True, "tree_spawn": False, "mode": "torchrun", "scheduler": "none",
                       "nodes": [{"name": "head"}, {"name": "w1"}], "mpirun_extra_args": [], **params}


@pytest.mark.parametrize("check_mode, params, shared", [
    (False, {}, True),
    (True, {}, False),  # a check starts nothing
    (False, {"tree_spawn": True}, False),  # the head does not ssh to every node
    (False, {"mode": "mpich"}, False),
    (False, {"scheduler": "slurm"}, False),  # Slurm starts mpirun's daemons
    (False, {"check_nodes": False}, False),
    (False, {"nodes": [{"name": "head"}]}, False),
    (False, {"mpirun_extra_args": ["--mca", "plm_rsh_args", "-p 2222"]}, False),  # theirs, kept
])
def test_mpirun_rides_ssh_masters_only_where_it_sshes_to_every_node_itself(check_mode, params, shared,
                                                                           monkeypatch):
    for name in ("OMPI_MCA_plm_rsh_args", "OMPI_MCA_plm_rsh_agent"):
        monkeypatch.delenv(name, raising=False)
    control_dir = start.ssh_masters(_Module(check_mode, **params))
    try:
        assert (control_dir is not None) == shared
        if control_dir:
            # Room for ssh's socket name (%C, 40 characters, and a temporary suffix) in 107 bytes.
            assert control_dir.startswith("/tmp/tf-ssh-") and len(control_dir) < 40
            assert oct(os.stat(control_dir).st_mode & 0o777) == "0o700"
    finally:
        if control_dir:
            os.rmdir(control_dir)


def test_an_rsh_option_in_the_environment_keeps_the_masters_off(monkeypatch):
    monkeypatch.setenv("OMPI_MCA_plm_rsh_args", "-p 2222")
    assert start.ssh_masters(_Module()) is None


def test_closing_the_masters_asks_each_to_exit_and_removes_their_directory(tmp_path):
    fake = tmp_path / "ssh"
    calls = tmp_path / "calls"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    fake.chmod(0o755)
    control_dir = tmp_path / "masters"
    control_dir.mkdir()
    (control_dir / "0123abcd").touch()  # a master's socket
    fanout.close_ssh_masters(str(fake), str(control_dir), ["10.0.0.2", "10.0.0.3"])
    assert sorted(calls.read_text().splitlines()) == [
        f"-o ControlPath={control_dir}/%C -O exit 10.0.0.2", f"-o ControlPath={control_dir}/%C -O exit 10.0.0.3"]
    assert not control_dir.exists()
    empty = tmp_path / "none"
    empty.mkdir()
    fanout.close_ssh_masters(None, str(empty), ["10.0.0.2"])  # no ssh: nothing to ask
    assert not empty.exists()


def test_timeout_message_names_the_silent_nodes():
    silent = [{"name": "w2", "address": "10.0.0.3", "error": "No route to host"}]
    message = report.timeout_message("r", 60, 10, silent, "/runs/r")
    assert message.startswith("run r outlived launch_timeout=60s and was stopped")
    assert "these nodes went silent, they do not answer ssh from the head: w2 (10.0.0.3)" in message
    assert "launch.yml -e launch_action=stop" in message and message.endswith("logs under /runs/r")
    assert "every node answers ssh" in report.timeout_message("r", 60, 10, [], "/runs/r")
    assert "ssh" not in report.timeout_message("r", 60, 10, None, "/runs/r")  # not probed


def test_read_tail_of_a_long_log(tmp_path):
    log = tmp_path / "launcher.log"
    log.write_text("".join(f"line {i}\n" for i in range(200000)))
    assert report.read_tail(str(log)) == [f"line {i}" for i in range(199980, 200000)]
    assert report.read_tail(str(tmp_path / "missing")) == []


# ---------------------------------------------------------------------------------------------
# Environment
# ---------------------------------------------------------------------------------------------

def test_env_pass_adds_path_ld_library_path_and_nccl_when_set():
    environ = {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/lib", "NCCL_DEBUG": "INFO",
               "NCCL_IB_DISABLE": "1", "HF_HOME": "/data/hf", "OTHER": "x"}
    names, missing = start.resolve_env_pass(["HF_HOME"], environ, taken=frozenset())
    assert names == ["HF_HOME", "PATH", "LD_LIBRARY_PATH", "NCCL_DEBUG", "NCCL_IB_DISABLE"]
    assert missing == []


def test_env_pass_adds_only_what_is_set():
    assert start.resolve_env_pass([], {"PATH": "/bin"}, taken=frozenset()) == (["PATH"], [])
    assert start.resolve_env_pass([], {}, taken=frozenset()) == ([], [])


def test_env_pass_explicit_names_must_be_set():
    names, missing = start.resolve_env_pass(["HF_HOME", "DATA", "HF_HOME"], {"DATA": "/d"},
                                            taken=frozenset())
    assert names == ["HF_HOME", "DATA"]
    assert missing == ["HF_HOME"]


def test_env_pass_leaves_out_what_torchfleet_or_the_user_sets():
    # NCCL_SOCKET_IFNAME comes from the nodes' interfaces; NCCL_DEBUG is in env_set.
    environ = {"PATH": "/bin", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN",
               "NCCL_ALGO": "Ring"}
    taken = RESERVED_ENV | {"NCCL_DEBUG"}
    names, missing = start.resolve_env_pass([], environ, taken)
    assert names == ["PATH", "NCCL_ALGO"]
    plan = Plan(nodes=(Node("a", "10.0.0.1", 1, "eth0"),), head="a", script="t.py", run_id="r",
                hostfile_path="/tmp/h", env_pass=tuple(names), env_set={"NCCL_DEBUG": "INFO"})
    render(plan)  # the renderer accepts the result


def test_launcher_env_keeps_little_of_the_module_environment():
    environ = {"PATH": "/bin", "HOME": "/root", "LC_ALL": "C.UTF-8",
               "OMPI_MCA_plm_rsh_agent": "ssh", "ANSIBLE_MODULE_ARGS": "x",
               "PYTHONPATH": "/tmp/ansible", "HF_HOME": "/hf", "RANDOM_VAR": "1"}
    env = start.launcher_env(environ, {"HF_HOME"}, {"TORCHFLEET_RUN_ID": "r"}, {"TOKEN": "s"})
    assert env == {"PATH": "/bin", "HOME": "/root", "LC_ALL": "C.UTF-8",
                   "OMPI_MCA_plm_rsh_agent": "ssh", "HF_HOME": "/hf", "TORCHFLEET_RUN_ID": "r",
                   "TOKEN": "s"}


# ---------------------------------------------------------------------------------------------
# Run ids and processes
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


def test_run_id_from_proc_environ_bytes():
    raw = b"PATH=/bin\0TORCHFLEET_RUN_ID=tf-1\0HOME=/root\0"
    assert node_probe.env_value(raw) == "tf-1"
    assert node_probe.env_value(b"PATH=/bin\0XTORCHFLEET_RUN_ID=no\0") is None
    assert node_probe.env_value(b"") is None  # a zombie's environ


def test_group_runs():
    procs = [{"pid": 5, "run_id": "b"}, {"pid": 3, "run_id": "a"}, {"pid": 7, "run_id": "b"}]
    assert report.group_runs(procs) == [{"run_id": "a", "pids": [3]}, {"run_id": "b", "pids": [5, 7]}]


# Lines of a real /proc/net/tcp: a listener on 0.0.0.0:29577 (0x7389), one on :2024, and
# established connections to port 22.
PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:7389 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 668753 1 000000008c3dc9a8 100 0 0 10 0
   1: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 84 1 0000000029d78d20 100 0 0 10 0
   2: 010012AC:920E 020012AC:0016 01 00000000:00000000 02:000A5FB7 00000000     0        0 576392 2 00000000d2b25a05 21 4 27 996 -1
"""
PROC_NET_TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF00000100007F:7389 0000000000000000FFFF00000100007F:B2BF 06 00000000:00000000 03:00000865 00000000     0        0 0 3 00000000a3cdebde
"""


def test_listening_inodes():
    assert node_probe.listening_inodes(PROC_NET_TCP, 29577) == {668753}
    assert node_probe.listening_inodes(PROC_NET_TCP, 2024) == {84}
    assert node_probe.listening_inodes(PROC_NET_TCP, 37390) == set()  # 0x920E: a connection, not a bind
    assert node_probe.listening_inodes(PROC_NET_TCP6, 29577) == set()  # TIME_WAIT does not hold it


# ---------------------------------------------------------------------------------------------
# Documentation and argument spec agree
# ---------------------------------------------------------------------------------------------

def _doc(name):
    return yaml.safe_load(getattr(tl, name))


def test_argument_spec_matches_documentation():
    options = _doc("DOCUMENTATION")["options"]
    assert set(options) == set(tl.ARGUMENT_SPEC)
    for name, spec in tl.ARGUMENT_SPEC.items():
        doc = options[name]
        assert doc["type"] == spec["type"], name
        assert doc.get("default") == spec.get("default"), name
        assert doc.get("choices") == spec.get("choices"), name
        assert doc.get("elements") == spec.get("elements"), name
    suboptions = options["nodes"]["suboptions"]
    assert {name: (doc["type"], doc.get("required", False)) for name, doc in suboptions.items()} \
        == {name: (spec["type"], spec.get("required", False))
            for name, spec in tl.ARGUMENT_SPEC["nodes"]["options"].items()}
    assert tl.ARGUMENT_SPEC["env_secrets"]["no_log"] is True


def test_every_result_key_is_documented():
    documented = set(_doc("RETURN"))
    for key in ("rc", "run_id", "argv", "command", "hostfile", "hostfile_path", "env",
                "per_node_env", "duration", "log_dir", "launcher_log", "rank_logs_dir",
                "worker_logs_dir", "nodes", "world_size", "timed_out", "stdout_tail",
                "failed_rank", "failed_host", "failed_exit_code", "failed_log", "failed_log_tail",
                "runs", "stopped", "port_holders", "survivors", "silent_nodes", "stopped_on_nodes"):
        assert key in documented, key


def test_examples_parse():
    assert len(_doc("EXAMPLES")) == 4


def test_the_probe_names_missing_and_different_files_and_writes_whole_ones(tmp_path):
    same, changed, binary = tmp_path / "train.py", tmp_path / "data.csv", tmp_path / "weights.bin"
    same.write_text("print('hi')\n")
    changed.write_text("a,b\n")
    binary.write_bytes(bytes(range(256)) * 4096)  # more than one read block, not text
    expected = {str(same): node_probe.file_sha1(str(same)), str(changed): "0" * 40,
                str(binary): node_probe.file_sha1(str(binary)), str(tmp_path / "gone.py"): "0" * 40}
    assert node_probe.file_sha1(str(binary)) == hashlib.sha1(binary.read_bytes()).hexdigest()
    answer = node_probe.probe({"expect": expected})
    assert answer["stale"] == sorted([str(changed), str(tmp_path / "gone.py")])
    assert "written" not in answer  # a check writes nothing

    fresh = tmp_path / "new" / "dir" / "gone.py"
    answer = node_probe.probe({"write": {str(fresh): base64.b64encode(b"x = 1\n").decode()},
                               "expect": {str(fresh): hashlib.sha1(b"x = 1\n").hexdigest()}})
    assert answer == {"runs": answer["runs"], "written": [str(fresh)], "stale": []}
    assert fresh.read_bytes() == b"x = 1\n"
    assert oct(fresh.stat().st_mode & 0o777) == "0o640"
    assert oct(fresh.parent.stat().st_mode & 0o777) == "0o750"
    assert [p.name for p in fresh.parent.iterdir()] == ["gone.py"]  # no partial file left


def test_the_probes_stop_ends_that_run_alone_and_names_what_it_ended():
    # What the head asks of every other node after a failed run: TERM, grace, KILL for that run.
    def start(run_id, *argv):
        env = dict(os.environ, **{node_probe.RUN_ID_VAR: run_id})
        return subprocess.Popen(argv, env=env, start_new_session=True)
    failed = start("tf-unit-failed", "sleep", "60")
    stubborn = start("tf-unit-failed", sys.executable, "-c",
                     "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)")
    other = start("tf-unit-other", "sleep", "60")
    try:
        time.sleep(0.5)  # the stubborn one has set its handler
        answer = node_probe.probe({"stop": {"run_id": "tf-unit-failed", "grace": 1}})
        assert sorted(proc["pid"] for proc in answer["stopped"]) == sorted([failed.pid, stubborn.pid])
        assert answer["survivors"] == []
        assert failed.wait(timeout=10) == -signal.SIGTERM
        assert stubborn.wait(timeout=10) == -signal.SIGKILL  # after the grace
        assert other.poll() is None  # another run is not this stop's business
        assert node_probe.probe({"stop": {"run_id": "tf-unit-failed", "grace": 1}}) == {
            "stopped": [], "survivors": []}
    finally:
        for proc in (failed, stubborn, other):
            proc.kill()
            proc.wait()


def test_the_probe_runs_alone_as_the_head_sends_it(tmp_path):
    # The head runs the file's source with `python -c` on the other nodes: it must need nothing
    # but the standard library, and answer JSON for the JSON request on stdin.
    argv = shlex.split(fanout.probe_command(sys.executable))
    assert argv[:3] == [sys.executable, "-S", "-c"]
    target = tmp_path / "t.py"
    done = subprocess.run(argv, input=json.dumps({"expect": {str(target): "0" * 40}}),
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stale"] == [str(target)]
    alive = subprocess.run(argv, input="{}", capture_output=True, text=True, timeout=60, check=False)
    assert json.loads(alive.stdout) == {}  # the silent-node check: an answer, nothing scanned
    broken = subprocess.run(argv, input="not json", capture_output=True, text=True, timeout=60, check=False)
    assert "error" in json.loads(broken.stdout)


# ---------------------------------------------------------------------------------------------
# The head package, as the module sends and starts it
# ---------------------------------------------------------------------------------------------

# The keys of a finished run's state.json (one node, no scheduler) as the supervisor has always
# written them: readers of old and new runs see the same record.
FINISHED_RUN_KEYS = {
    "run_id", "state", "rc", "duration", "command", "nodes", "slots", "head", "mode", "nproc",
    "world_size", "started", "started_at", "ended", "log_dir", "launcher_log", "scheduler", "job_id",
    "supervisor_pid", "supervisor_start", "boot_id", "launcher_pid", "timed_out", "failed_rank",
    "failed_host", "failed_exit_code", "failed_log", "failed_log_tail", "msg", "warnings",
    "stdout_tail", "rank0_tail", "restarts"}


def test_the_head_package_lists_each_of_its_files():
    here = Path(_head.__file__).parent
    assert sorted(_head.FILES) == sorted(path.stem for path in here.glob("*.py"))


def test_the_supervisor_runs_from_the_package_installed_once_for_its_version(tmp_path):
    run_dir = tmp_path / "tf-unit-supervised"
    run_dir.mkdir(parents=True)
    package = start.install_head_package(str(tmp_path / "home"))
    assert start.install_head_package(str(tmp_path / "home")) == package  # once per version
    installed = Path(package).parent.parent
    assert package.startswith(str(tmp_path / "home" / ".local" / "share" / "torchfleet" / "head"))
    assert [path.name for path in installed.iterdir()] == [Path(package).parent.name]  # nothing half-written left
    paths = {"run": str(run_dir), "launcher": str(run_dir / "launcher.log"), "ranks": "", "workers": ""}
    plan = SupervisorPlan(
        run_id=run_dir.name, argv=[sys.executable, "-c", "import os; print(os.getcwd())"], cwd=None,
        command="print the directory", nodes=[{"name": "here", "address": "127.0.0.1", "slots": 1}],
        head="here", mode="rank", nproc=1, world_size=1, python=sys.executable, ssh=None,
        check_nodes=False, control_dir=None, launch_timeout=0, stop_grace=1, paths=paths)
    (run_dir / PLAN_FILE).write_text(plan.to_json())
    env = {"PATH": os.environ["PATH"], node_probe.RUN_ID_VAR: run_dir.name, node_probe.SUPERVISOR_VAR: run_dir.name}
    proc = supervisor.start(sys.executable, package, str(run_dir), env)
    assert proc.wait(timeout=60) == 0, (run_dir / "supervisor.log").read_text()
    assert proc.args[1:4] == ["-S", "-m", "_head.supervisor"]
    record = read_state(str(run_dir))
    assert (record["state"], record["rc"], record["msg"]) == ("succeeded", 0, f"run {run_dir.name} succeeded")
    assert set(record) == FINISHED_RUN_KEYS
    # The launcher starts in the run's directory where the plan names none.
    assert os.path.realpath((run_dir / "launcher.log").read_text().strip()) == os.path.realpath(run_dir)


def test_a_changed_cluster_interface_is_named_with_what_setup_recorded():
    from ansible_collections.torchfleet.cluster.plugins.module_utils._head.node_checks import interface_change
    from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_plan import Node
    node = Node("n2", "10.0.0.3", 1, "eth0")
    assert interface_change(node, {"lo": ["127.0.0.1"], "eth0": ["10.0.0.3"]}) is None
    assert interface_change(node, None) is None  # the node could not tell
    assert interface_change(Node("n2", "10.0.0.3", 1), {}) is None  # one node: no interface to check
    assert interface_change(node, {"eth1": ["10.0.0.3"]}) == (
        "n2: setup recorded eth0 with 10.0.0.3; the node now has no interface eth0, and 10.0.0.3 on eth1")
    assert interface_change(node, {"eth0": [], "ib0": ["10.0.0.3"]}) == (
        "n2: setup recorded eth0 with 10.0.0.3; the node now has eth0 with no IPv4 address, and 10.0.0.3 on ib0")
    assert interface_change(Node("n2", "n2.cluster", 1, "eth0"), {"eth0": []}) is None  # a name: the interface alone


def _supervised(tmp_path, name, argv, start_timeout, wait=True, env=None):
    """A supervisor of its own for a launcher `argv` on this machine alone, started as the module
    starts it; its end's record, or (not `wait`) the supervisor's Popen."""
    run_dir = tmp_path / name
    run_dir.mkdir(parents=True)
    package = start.install_head_package(str(tmp_path / "home"))
    paths = {"run": str(run_dir), "launcher": str(run_dir / "launcher.log"), "ranks": "", "workers": ""}
    plan = SupervisorPlan(
        run_id=name, argv=argv, cwd=None, command="a launcher", nodes=[{"name": "here", "address": "127.0.0.1", "slots": 1}],
        head="here", mode="rank", nproc=1, world_size=1, python=sys.executable, ssh=None, check_nodes=False,
        control_dir=None, launch_timeout=60, stop_grace=1, paths=paths, start_timeout=start_timeout)
    (run_dir / PLAN_FILE).write_text(plan.to_json())
    env = {"PATH": os.environ["PATH"], node_probe.RUN_ID_VAR: name, node_probe.SUPERVISOR_VAR: name, **(env or {})}
    proc = supervisor.start(sys.executable, package, str(run_dir), env)
    if not wait:
        return proc
    proc.wait(timeout=90)  # 0 for a run that succeeded, 1 for one that did not
    return read_state(str(run_dir))


def test_a_supervisor_killed_outright_leaves_nothing_running_and_its_run_recorded_lost(tmp_path):
    # A launcher with a rank of its own session (as torchrun's workers are): the guardian ends
    # both once the supervisor is SIGKILLed, and records the run lost, saying what it did.
    rank = "import time; time.sleep(600)"
    launcher = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {rank!r}], "
                f"start_new_session=True); time.sleep(600)")
    proc = _supervised(tmp_path, "tf-unit-killed", [sys.executable, "-c", launcher], 0, wait=False)
    run_dir = str(tmp_path / "tf-unit-killed")
    deadline = time.monotonic() + 30
    while len(node_probe.find_run_processes({"tf-unit-killed"})) < 4:  # supervisor, guardian, launcher, rank
        assert time.monotonic() < deadline, node_probe.find_run_processes({"tf-unit-killed"})
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    killed = time.monotonic()
    while node_probe.find_run_processes({"tf-unit-killed"}):
        assert time.monotonic() - killed < 30, node_probe.find_run_processes({"tf-unit-killed"})
        time.sleep(0.1)
    record = read_state(run_dir)
    assert record["state"] == "lost" and record["ended"], record
    assert record["msg"].startswith("the supervisor of run tf-unit-killed died at "), record["msg"]
    assert "its guardian ended the run (2 process(es) on the head)" in record["msg"], record["msg"]


def test_a_supervisor_that_fails_mid_run_ends_the_run_before_it_records_the_failure(tmp_path):
    # Its record's write fails once the ranks run (the injected fault): the launcher and its rank,
    # in a session of its own as torchrun's workers are, are ended; the record names the error.
    rank = "import time; time.sleep(600)"
    launcher = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {rank!r}], "
                f"start_new_session=True); time.sleep(600)")
    record = _supervised(tmp_path, "tf-unit-fails", [sys.executable, "-c", launcher], 60,
                         env={transitions.FAULT_VAR: transitions.FAULT_SAVE})
    assert (record["state"], record["rc"]) == ("failed", 1), record
    assert record["msg"].startswith("the supervisor of run tf-unit-fails failed: OSError: [Errno 5] "
                                    "TORCHFLEET_FAULT=save-after-launch"), record["msg"]
    assert "its launcher and what the run ran on the head were ended" in record["msg"], record["msg"]
    deadline = time.monotonic() + 10
    while node_probe.find_run_processes({"tf-unit-fails"}):  # its guardian goes too
        assert time.monotonic() < deadline, node_probe.find_run_processes({"tf-unit-fails"})
        time.sleep(0.1)
    assert read_state(str(tmp_path / "tf-unit-fails"))["state"] == "failed"


def test_a_supervisor_that_ends_well_takes_its_guardian_with_it(tmp_path):
    record = _supervised(tmp_path, "tf-unit-guarded", [sys.executable, "-c", "pass"], 0)
    assert record["state"] == "succeeded"
    deadline = time.monotonic() + 10
    while node_probe.find_run_processes({"tf-unit-guarded"}):
        assert time.monotonic() < deadline, node_probe.find_run_processes({"tf-unit-guarded"})
        time.sleep(0.1)
    assert read_state(str(tmp_path / "tf-unit-guarded"))["state"] == "succeeded"


def test_a_launcher_that_never_starts_a_rank_is_ended_at_start_timeout_naming_the_node(tmp_path):
    # A launcher waiting for ever (as mpirun for a daemon that cannot call back), no rank started.
    began = time.monotonic()
    record = _supervised(tmp_path, "tf-unit-never", [sys.executable, "-c", "import time; time.sleep(600)"], 2)
    assert time.monotonic() - began < 60
    assert (record["state"], record["never_started"], record["timed_out"]) == ("failed", ["here"], False)
    assert record["msg"].startswith("run tf-unit-never did not start within start_timeout (2 s): no process "
                                    "of it ran on here")


def test_a_run_whose_ranks_started_outlives_start_timeout(tmp_path):
    rank = "import time; time.sleep(4)"
    launcher = f"import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', {rank!r}]).returncode)"
    record = _supervised(tmp_path, "tf-unit-started", [sys.executable, "-c", launcher], 1)
    assert (record["state"], record["rc"]) == ("succeeded", 0)
    assert "never_started" not in record


def test_one_start_at_a_time_holds_the_launch_lock_and_names_its_run(tmp_path):
    from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_lock
    lock = str(tmp_path / "launch.lock")
    held = _launch_lock.hold("tf-first", lock)
    # Another process, as a second launch on the head would be: refused, naming the first run.
    probe = ("import sys; from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_lock as l\n"
             "try:\n    l.hold('tf-second', sys.argv[1])\nexcept l.LaunchLocked as e:\n    print(e); sys.exit(3)")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[4] / ".collections"))
    second = subprocess.run([sys.executable, "-c", probe, lock], capture_output=True, text=True, env=env, check=False)
    assert second.returncode == 3, second.stderr
    assert second.stdout.startswith("run tf-first (started ")
    _launch_lock.release(held)
    assert _launch_lock.wait_free(1, lock)
    again = subprocess.run([sys.executable, "-c", probe, lock], capture_output=True, text=True, env=env, check=False)
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_stop_that_lands_as_the_run_ends_keeps_the_runs_own_outcome(tmp_path):
    # The launcher's last act is a stop to its supervisor; the run had ended by itself, with 0.
    launcher = "import os, signal; os.kill(os.getppid(), signal.SIGTERM); os._exit(0)"
    record = _supervised(tmp_path, "tf-unit-late-stop", [sys.executable, "-c", launcher], 0)
    assert (record["state"], record["rc"]) == ("succeeded", 0), record["msg"]


def test_a_run_that_fills_its_disk_still_records_how_it_ended(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system for the run's directory needs root")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(small)], check=True)
    try:
        # The launcher writes until the disk is full, then ends well.
        fill = ("f = open('fill', 'wb')\ntry:\n    while True:\n        f.write(b'x' * 65536)\n        f.flush()\n"
                "except OSError:\n    pass\n")  # nothing printed: launcher.log is on the full disk too
        record = _supervised(small, "tf-unit-full", [sys.executable, "-c", fill], 0)
        assert (record["state"], record["rc"]) == ("succeeded", 0), record
        assert not (small / "tf-unit-full" / "state.reserve").exists()  # given back once used
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_an_open_mpi_daemon_is_known_by_its_runs_log_directory():
    argv = [b"/usr/bin/orted", b"--daemonize", b"-mca", b"ess", b"env", b"-mca", b"orte_output_filename",
            b"/home/torchfleet/torchfleet/runs/tf-20261125-164309-2f2f29/ranks", b"-mca", b"orte_tag_output", b"1"]
    assert node_probe.daemon_run_id(b"\0".join(argv) + b"\0") == "tf-20261125-164309-2f2f29"
    assert node_probe.daemon_run_id(b"/usr/bin/python3\0-c\0orte_output_filename\0/x/tf-1/ranks\0") is None
    assert node_probe.daemon_run_id(b"/usr/bin/orted\0--daemonize\0") is None
