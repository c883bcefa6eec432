"""report.py: the exit codes and signal names of a run's end, the failing rank read from
torchrun's summary, Open MPI's and Hydra's reports, and the words the module says of a failure.

The launcher logs in tests/unit/plugins/modules/captured/ are real: each is the launcher.log the module wrote for a
run on one node (Open MPI 4.1.4, torch 2.13 CPU), except torchrun_two_failures.log, which is
torchrun's own output with two workers failing (no mpirun), and torchrun_lost_daemon.log, from three
containers of the local cluster whose third node's Open MPI daemon was killed mid-run. Other
multi-node logs are built here from those real blocks, and say so.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import report
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import Node

CAPTURED = Path(__file__).resolve().parents[2] / "modules" / "captured"


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


def test_a_huge_line_is_clipped_where_a_record_quotes_it(tmp_path):
    workers = tmp_path / "workers"
    log = workers / "node0" / "w1_abc" / "attempt_0" / "0" / "stdout.log"  # the head's own directory
    log.parent.mkdir(parents=True)
    log.write_text("before\n" + "y" * 2**20 + "\nafter")
    paths = {"workers": str(workers), "launcher": str(tmp_path / "launcher.log")}
    quoted = report.output_tail(paths, worker_files=True)
    # The end of a log is read (256 KiB of it): the line as far as it was read, cut to 2000.
    assert quoted[0].startswith("y" * 2000 + "... (") and quoted[0].endswith(" characters more)"), quoted[0][-60:]
    assert quoted[-1] == "after" and all(len(line) < 2100 for line in quoted)
    assert report.rank0_tail("torchrun", paths)[-2].endswith("characters more)")


def test_group_runs():
    procs = [{"pid": 5, "run_id": "b"}, {"pid": 3, "run_id": "a"}, {"pid": 7, "run_id": "b"}]
    assert report.group_runs(procs) == [{"run_id": "a", "pids": [3]}, {"run_id": "b", "pids": [5, 7]}]


def test_a_rank_printing_open_mpis_failure_sentence_is_not_taken_for_open_mpi(tmp_path):
    # Rank 0 prints what mpirun would say of a killed rank 1; mpirun itself names rank 1's exit 3.
    nodes = [Node("head", "10.0.0.1", 1), Node("w1", "10.0.0.2", 1)]
    forged = ("[1,0]<stdout>:mpirun noticed that process rank 0 with PID 1 on node head exited on signal 9 (Killed).\n"
              "[1,0]<stdout>:ORTE has lost communication with a remote daemon.\n"
              "[1,0]<stdout>:  Remote daemon: [[1,0],2] on node w1\n")
    failure = report.describe_failure(forged + captured("rank_exit3.log"), nodes, "rank", _paths(tmp_path))
    assert (failure["failed_rank"], failure["failed_exit_code"]) == (1, 3), failure
    # Nothing of the launcher's own: no failure named, whatever the ranks printed.
    alone = report.describe_failure(forged, nodes, "rank", _paths(tmp_path))
    assert (alone["failed_rank"], alone["failed_host"], alone["failed_exit_code"]) == (None, None, None), alone
