"""The torchrun_launch module through real Ansible and real Open MPI, on a one-node cluster.

This machine is the whole cluster (local_node.py): its own non-loopback address as the node, two
slots, rank mode (one MPI rank per slot), and training scripts in plain Python written by the
tests, so neither torch nor a GPU is needed. Every run gets a run id of its own, and whatever of it is left is
stopped at the end of each test.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import signal
import socket
import uuid
from pathlib import Path

import pytest

from local_node import (LIMIT, SCRIPT, Cluster, alive, local_address, module_pid, poll, ppid, rank_file, rank_text, record_of,
                        running, wait_for_ranks)

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import stacks


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(tmp_path)
    yield cluster
    assert cluster.cleanup() == [], "a test left processes of its runs behind"


def test_success_runs_every_rank_and_keeps_their_logs(cluster):
    args = cluster.args()
    rc, output, result = cluster.run(args)
    assert rc == 0, output
    assert result["changed"] is True and result["rc"] == 0 and result["timed_out"] is False
    # Nothing outlived the launcher: the supervisor's guardian is its own, never a leftover.
    assert "outlived" not in output, output
    assert result["world_size"] == 2 and result["nodes"] == ["here"]
    run_dir = cluster.runs_dir / args["run_id"]
    assert result["log_dir"] == str(run_dir)
    assert oct(run_dir.stat().st_mode & 0o777) == "0o750"
    assert (run_dir / "hostfile").read_text() == f"{local_address()} slots=2\n"
    assert result["argv"][:3] == ["mpirun", "-np", "2"]
    for rank in (0, 1):
        assert rank_text(result, rank).splitlines()[0] == \
            f"RANK={rank} WORLD_SIZE=2 RUN={args['run_id']}"
    launcher = Path(result["launcher_log"]).read_text()
    assert f"RANK=0 WORLD_SIZE=2 RUN={args['run_id']}" in launcher
    assert any("RANK=1 WORLD_SIZE=2" in line for line in result["stdout_tail"])
    assert alive(args["run_id"]) == []

    # The same run id again: its directory exists, the launch is refused.
    rc, output, again = cluster.run(args)
    assert rc != 0
    assert f"{run_dir} already exists" in again["msg"]


def test_a_rank_exiting_3_is_reported_with_its_log(cluster):
    args = cluster.args(env_set={"TF_TEST_ACTION": "exit"})
    rc, output, result = cluster.run(args)
    assert rc != 0
    assert result["rc"] == 3  # Open MPI passes the first failed rank's status through
    assert (result["failed_rank"], result["failed_host"], result["failed_exit_code"]) == \
        (1, "here", 3)
    assert result["failed_log"] == str(rank_file(result, 1, "stderr"))
    assert result["failed_log_tail"] == ["rank 1 gives up"]
    assert "rank 1 on here exited with code 3 first" in result["msg"]
    assert result["launcher_log"] in result["msg"]


def test_a_rank_killed_by_a_signal_is_128_plus_n(cluster):
    args = cluster.args(env_set={"TF_TEST_ACTION": "kill"})
    rc, output, result = cluster.run(args)
    assert rc != 0
    assert result["rc"] == 128 + signal.SIGKILL
    assert (result["failed_rank"], result["failed_exit_code"]) == (1, 128 + signal.SIGKILL)
    assert "was killed by SIGKILL (exit code 137)" in result["msg"]


def test_launch_timeout_stops_the_whole_run(cluster):
    # 10 s: the ranks have started by then even on two cores shared with the rest of `make test`
    # (at 3 s, rank 1 had not once, in CI at 43f2669).
    args = cluster.args(env_set={"TF_TEST_ACTION": "sleep"}, launch_timeout=10, stop_grace=2)
    rc, output, result = cluster.run(args)
    assert rc != 0
    assert (result["timed_out"], result["rc"]) == (True, 124)  # the time-out's code, not TERM's 143
    assert "outlived launch_timeout=10s and was stopped" in result["msg"]
    assert alive(args["run_id"]) == []  # the module checked before it returned
    for rank in (0, 1):  # the ranks had started
        assert rank_text(result, rank).startswith(f"RANK={rank}")


def test_a_live_run_refuses_a_new_launch_until_stopped(cluster):
    first = cluster.args(env_set={"TF_TEST_ACTION": "sleep"})
    proc, tree = cluster.start(first)
    wait_for_ranks(first["run_id"])
    pids = {p["pid"] for p in alive(first["run_id"])}  # the supervisor, its guardian, mpirun, two ranks
    assert len(pids) == 5
    assert [p["supervisor"] for p in alive(first["run_id"])].count(True) == 2

    rc, output, refused = cluster.run(cluster.args())
    assert rc != 0
    assert f"an earlier torchfleet run is still alive on here: {first['run_id']}" \
        in refused["msg"]
    assert "ansible-playbook launch.yml -e launch_action=stop" in refused["msg"]
    assert refused["runs"] == [{"node": "here", "run_id": first["run_id"], "pids": sorted(pids)}]
    assert not (cluster.runs_dir / refused["run_id"]).exists()

    # Check mode reports what would be stopped and leaves it running.
    rc, output, would = cluster.run({"state": "stopped", "run_id": first["run_id"]}, check=True)
    assert rc == 0, output
    assert would["changed"] is True
    assert would["runs"] == [{"run_id": first["run_id"], "pids": sorted(pids)}]
    assert {p["pid"] for p in alive(first["run_id"])} == pids

    rc, output, stopped = cluster.run({"state": "stopped", "run_id": first["run_id"],
                                       "stop_grace": 5})
    assert rc == 0, output
    assert stopped["changed"] is True
    assert {p["pid"] for p in stopped["stopped"]} == pids
    assert {p["run_id"] for p in stopped["stopped"]} == {first["run_id"]}
    assert any(p["cmdline"].startswith("mpirun ") for p in stopped["stopped"])
    assert alive(first["run_id"]) == []

    # The first launch ends, failed: its supervisor stopped the run and recorded it so.
    proc.communicate(timeout=LIMIT)
    result = json.loads((tree / "localhost").read_text())
    assert proc.returncode != 0 and result["rc"] != 0 and result["state"] == "stopped"
    assert f"run {first['run_id']} was stopped (SIGTERM to its supervisor" in result["msg"]
    record = json.loads((cluster.runs_dir / first["run_id"] / "state.json").read_text())
    assert record["state"] == "stopped" and record["rc"] == result["rc"]

    # Nothing left: stopping again changes nothing, and a launch goes ahead.
    rc, output, again = cluster.run({"state": "stopped", "run_id": first["run_id"]})
    assert (rc, again["changed"], again["stopped"]) == (0, False, [])
    rc, output, result = cluster.run(cluster.args())
    assert rc == 0, output


def test_taken_rendezvous_port_refuses_the_launch(cluster):
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        args = cluster.args(master_port=port)
        rc, output, result = cluster.run(args)
    assert rc != 0
    assert f"the rendezvous port {port} is already in use" in result["msg"]
    assert "-e master_port=N" in result["msg"]
    assert f"pid {os.getpid()} (" in result["msg"]  # this test holds it
    assert not (cluster.runs_dir / args["run_id"]).exists()


def test_the_script_is_written_where_it_is_missing_or_stale_and_only_there(cluster):
    placed = cluster.tmp / "scripts" / "train.py"
    config = cluster.tmp / "scripts" / "config.bin"
    contents = {str(placed): base64.b64encode(SCRIPT.encode()).decode(),
                str(config): base64.b64encode(bytes(range(256))).decode()}
    # With the ranks' sitecustomize.py in the account's home (stacks.SITE), which every launch
    # places where it is missing or differs (an earlier test's launch may have placed it).
    site = Path(stacks.site_file(stacks.site_dir(str(Path.home()))))
    placed_all = sorted([*contents, *([] if site.exists() and site.read_text() == stacks.SITE else [str(site)])])
    args = cluster.args(script=str(placed), file_contents=contents)
    rc, output, would = cluster.run(args, check=True)
    assert rc == 0, output
    assert would["stale_files"] == {"here": placed_all}
    assert not placed.exists()  # check mode writes nothing

    rc, output, result = cluster.run(args)
    assert rc == 0, output
    assert result["stale_files"] == {"here": placed_all}
    assert placed.read_text() == SCRIPT and config.read_bytes() == bytes(range(256))
    assert SCRIPT not in output and contents[str(placed)] not in output  # no_log: never shown

    config.write_bytes(b"changed by hand")
    rc, output, result = cluster.run(cluster.args(script=str(placed), file_contents=contents))
    assert rc == 0, output
    assert result["stale_files"] == {"here": [str(config)]}
    rc, output, result = cluster.run(cluster.args(script=str(placed), file_contents=contents))
    assert rc == 0, output
    assert result["stale_files"] == {}


@pytest.mark.parametrize("contents, expected", [
    ({"relative/train.py": "eA=="}, "file_contents: relative/train.py is not an absolute path"),
    ({"/tmp/tf-never-written.py": "not base64!"}, "the content given for /tmp/tf-never-written.py is not base64"),
])
def test_file_contents_that_cannot_be_placed_are_refused(cluster, contents, expected):
    rc, output, result = cluster.run(cluster.args(file_contents=contents))
    assert rc != 0
    assert expected in result["msg"]
    assert not Path("/tmp/tf-never-written.py").exists() and not cluster.runs_dir.exists()


def test_check_mode_renders_and_writes_nothing(cluster):
    args = cluster.args(env_secrets={"TF_TEST_SECRET": "never-shown-5b1e"}, env_pass=["HOME"])
    rc, output, result = cluster.run(args, check=True)
    assert rc == 0, output
    assert result["changed"] is False
    assert result["command"].startswith("mpirun -np 2 --map-by slot")
    assert result["argv"][result["argv"].index("--hostfile") + 1] == \
        str(cluster.runs_dir / args["run_id"] / "hostfile")
    assert result["hostfile"] == f"{local_address()} slots=2\n"
    assert result["env"]["TF_TEST_SECRET"] == "<redacted>"
    assert result["env"]["HOME"] == "<inherited>" and result["env"]["PATH"] == "<inherited>"
    assert result["env"]["TORCHFLEET_RUN_ID"] == args["run_id"]
    assert "rc" not in result
    assert not cluster.runs_dir.exists()
    assert alive(args["run_id"]) == []


def test_secret_values_reach_the_ranks_and_nothing_else(cluster):
    secret = f"s3cret-{uuid.uuid4().hex}"
    args = cluster.args(env_secrets={"TF_TEST_SECRET": secret})
    rc, output, result = cluster.run(args)
    assert rc == 0, output
    digest = hashlib.sha256(secret.encode()).hexdigest()
    for rank in (0, 1):
        assert f"SECRET_SHA256={digest}" in rank_text(result, rank)
    assert secret not in output
    assert secret not in json.dumps(result)
    assert result["env"]["TF_TEST_SECRET"] == "<redacted>"
    run_dir = cluster.runs_dir / args["run_id"]
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path

    # A script that prints the secret leaks it into its own logs, but Ansible's output and the
    # result still mask it (no_log values).
    args = cluster.args(env_secrets={"TF_TEST_SECRET": secret},
                        env_set={"TF_TEST_ACTION": "leak"})
    rc, output, result = cluster.run(args)
    assert rc == 0, output
    assert f"LEAKED={secret}" in Path(result["launcher_log"]).read_text()
    assert secret not in output and secret not in json.dumps(result)
    assert any(line.startswith("LEAKED=****") for line in result["stdout_tail"])


def test_missing_env_pass_name_fails_before_anything_runs(cluster):
    args = cluster.args(env_pass=["TF_TEST_NOT_SET_ANYWHERE"])
    rc, output, result = cluster.run(args)
    assert rc != 0
    assert "env_pass names TF_TEST_NOT_SET_ANYWHERE, but the module's environment" in result["msg"]
    assert not cluster.runs_dir.exists()


def test_terminating_the_module_stops_the_run(cluster):
    # SIGTERM to the module itself (not to whatever started it) is an explicit stop.
    args = cluster.args(env_set={"TF_TEST_ACTION": "sleep"}, stop_grace=2)
    proc, tree = cluster.start(args)
    wait_for_ranks(args["run_id"])
    os.kill(module_pid(args["run_id"]), signal.SIGTERM)
    output = proc.communicate(timeout=LIMIT)[0]  # stderr goes to stdout
    result = json.loads((tree / "localhost").read_text())
    assert "the module was interrupted by SIGTERM" in result["msg"], output
    assert result["state"] == "stopped" and record_of(cluster, args["run_id"])["state"] == "stopped"
    assert alive(args["run_id"]) == []


def test_interrupting_ansible_on_the_head_stops_the_run(cluster):
    # ^C on ansible with a local connection (the controller is the head): it passes SIGINT to
    # its worker, which passes it to its process group, the module among it: an explicit stop.
    args = cluster.args(env_set={"TF_TEST_ACTION": "sleep"}, stop_grace=2)
    proc, tree = cluster.start(args)
    wait_for_ranks(args["run_id"])
    module = module_pid(args["run_id"])
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=LIMIT)
    poll(lambda: not alive(args["run_id"]), "the run to be stopped")
    poll(lambda: not running(module), "the module to exit")
    assert record_of(cluster, args["run_id"])["state"] == "stopped"


def test_sighup_to_the_module_leaves_the_run_to_its_supervisor(cluster):
    # A terminal closing, or sshd hanging up on the session: the module stops watching, the run
    # goes on and records its end.
    args = cluster.args(env_set={"TF_TEST_ACTION": "nap"}, stop_grace=2)
    proc, tree = cluster.start(args)
    wait_for_ranks(args["run_id"])
    module = module_pid(args["run_id"])
    os.kill(module, signal.SIGHUP)
    poll(lambda: not running(module), "the module to exit")
    assert record_of(cluster, args["run_id"])["state"] == "running"
    poll(lambda: record_of(cluster, args["run_id"])["state"] != "running", "the run to end")
    assert record_of(cluster, args["run_id"])["state"] == "succeeded"
    proc.communicate(timeout=LIMIT)
    # The last record comes a moment before the supervisor exits.
    poll(lambda: alive(args["run_id"]) == [], "the supervisor to exit after its last record")


def test_losing_the_caller_leaves_the_run_to_its_supervisor(cluster):
    # Changed with runs that belong to the cluster: ansible killed outright (or its ssh
    # connection gone, a terminal closed) used to stop the run; now the run goes on, and its
    # supervisor records how it ended. SIGKILL to everything between the module and ansible.
    args = cluster.args(env_set={"TF_TEST_ACTION": "nap"}, stop_grace=2)
    proc, tree = cluster.start(args)
    wait_for_ranks(args["run_id"])
    module = module_pid(args["run_id"])
    callers, pid = [], ppid(module)
    while pid > 1 and pid != proc.pid:  # the shells ansible ran the module with, its worker
        callers.append(pid)
        pid = ppid(pid)
    assert pid == proc.pid and callers, "the module runs under the ansible started here"
    for pid in [proc.pid, *callers]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.communicate(timeout=LIMIT)
    poll(lambda: not running(module), "the module to exit")
    assert record_of(cluster, args["run_id"])["state"] == "running"
    assert len([p for p in alive(args["run_id"]) if "train.py" in p["cmdline"]]) == 2
    poll(lambda: record_of(cluster, args["run_id"])["state"] != "running", "the run to end")
    record = record_of(cluster, args["run_id"])
    assert (record["state"], record["rc"]) == ("succeeded", 0), record
    # The supervisor writes its last record, then exits: a moment later, nothing of the run is left.
    poll(lambda: alive(args["run_id"]) == [], "the supervisor to exit after its last record")


def test_a_failing_rank_is_restarted_until_it_succeeds_each_attempt_recorded(cluster):
    # Rank 1 exits 3 in attempts 0 and 1, and succeeds in attempt 2: TORCHFLEET_RESTART_COUNT
    # tells it which attempt it is in.
    args = cluster.args(env_set={"TF_TEST_ACTION": "fail-twice"}, max_restarts=2)
    rc, output, result = cluster.run(args)
    assert rc == 0, output[-3000:]
    assert (result["state"], result["rc"], result["restarts"]) == ("succeeded", 0, 2), result["msg"]
    attempts = result["attempts"]
    assert [a["attempt"] for a in attempts] == [0, 1, 2]
    assert [a["cause"] for a in attempts] == ["rank 1 on here exited with code 3"] * 2 + [""]
    assert all(a["started"] and a["ended"] and a["nodes"] == ["here"] and a["world_size"] == 2 for a in attempts)
    log = Path(result["launcher_log"]).read_text()
    assert "torchfleet: attempt 1 of run" in log and "torchfleet: attempt 2 of run" in log
    assert "attempt 1 ended: rank 1 on here exited with code 3" in log
    assert re.findall(r"ATTEMPT=(\d)", log).count("2") == 2  # both ranks of the last attempt
    assert alive(args["run_id"]) == []


def test_restarts_run_out_and_final_codes_are_never_restarted(cluster):
    args = cluster.args(env_set={"TF_TEST_ACTION": "fail-twice"}, max_restarts=1)
    rc, output, result = cluster.run(args)
    assert rc != 0 and (result["state"], result["restarts"]) == ("failed", 1), result["msg"]
    assert [a["cause"] for a in result["attempts"]] == ["rank 1 on here exited with code 3"] * 2
    # The script says 3 is its own failure: no restart at all.
    args = cluster.args(env_set={"TF_TEST_ACTION": "fail-twice"}, max_restarts=5, final_exit_codes=[3])
    rc, output, result = cluster.run(args)
    assert rc != 0 and (result["state"], result["restarts"]) == ("failed", 0), result["msg"]
    assert result["failed_exit_code"] == 3 and len(result["attempts"]) == 1


def test_bad_restart_options_are_refused_before_anything_starts(cluster):
    for overrides, said in (({"max_restarts": -1}, "max_restarts is -1: give 0 or more."),
                            ({"min_nodes": 2}, "min_nodes is 2, above the run's 1 nodes"),
                            ({"max_restarts": 1, "scheduler": "slurm", "check_nodes": False},
                             "max_restarts is 1 under Slurm with check_nodes false")):
        args = cluster.args(**overrides)
        rc, output, result = cluster.run(args)
        assert rc != 0 and said in result["msg"], result["msg"]
        assert not (cluster.runs_dir / args["run_id"]).exists()


def test_a_failed_run_restarted_by_hand_goes_on_as_its_next_attempt(cluster):
    # No restarts allowed: attempt 0 fails. `state: restarted` starts it again from its own request,
    # as attempt 1 (which fails too: the script fails twice), then attempt 2, which succeeds.
    args = cluster.args(env_set={"TF_TEST_ACTION": "fail-twice"})
    rc, output, result = cluster.run(args)
    assert rc != 0 and result["state"] == "failed" and result["restarts"] == 0, result["msg"]
    restart = {"state": "restarted", "run_id": args["run_id"], "log_dir": args["log_dir"]}
    rc, output, again = cluster.run(restart)
    assert rc != 0 and (again["state"], again["restarts"], again["attempt"]) == ("failed", 1, 1), again["msg"]
    rc, output, last = cluster.run(restart)
    assert rc == 0, output[-3000:]
    assert (last["state"], last["rc"], last["restarts"], last["attempt"]) == ("succeeded", 0, 2, 2), last["msg"]
    attempts = last["attempts"]
    assert [a["attempt"] for a in attempts] == [0, 1, 2]
    assert "rank 1 on here exited with code 3" in attempts[0]["cause"]
    assert attempts[1]["cause"] == "rank 1 on here exited with code 3" and attempts[2]["cause"] == ""
    assert last["started"] == result["started"]  # one run, from its first start
    log = Path(result["launcher_log"]).read_text()
    assert "torchfleet: attempt 1 of run" in log and "torchfleet: attempt 2 of run" in log
    assert re.findall(r"ATTEMPT=(\d)", log).count("2") == 2  # both ranks of the last attempt
    assert (cluster.runs_dir / args["run_id"] / "hostfile.2").exists()
    assert alive(args["run_id"]) == []

    # A run that succeeded has nothing to restart; an unknown run is named.
    rc, output, refused = cluster.run(restart)
    assert rc != 0 and "there is nothing to restart" in refused["msg"], refused["msg"]
    rc, output, refused = cluster.run(dict(restart, run_id="it-no-such-run"))
    assert rc != 0 and "no run it-no-such-run in " in refused["msg"], refused["msg"]


def test_a_running_run_is_not_restarted(cluster):
    args = cluster.args(env_set={"TF_TEST_ACTION": "sleep"})
    proc, _tree = cluster.start(args)
    wait_for_ranks(args["run_id"])
    rc, output, refused = cluster.run({"state": "restarted", "run_id": args["run_id"], "log_dir": args["log_dir"]})
    assert rc != 0 and f"run {args['run_id']} is running (its supervisor, pid " in refused["msg"], refused["msg"]
    assert "stop it first" in refused["msg"], refused["msg"]
    assert len([p for p in alive(args["run_id"]) if "train.py" in p["cmdline"]]) == 2

    # Stopped, it may be restarted; detached, the restart returns once its ranks run.
    rc, output, _stopped = cluster.run({"state": "stopped", "run_id": args["run_id"]})
    assert rc == 0, output
    proc.communicate(timeout=LIMIT)
    rc, output, detached = cluster.run({"state": "restarted", "run_id": args["run_id"], "log_dir": args["log_dir"],
                                        "detach": True})
    assert rc == 0, output[-3000:]
    assert (detached["state"], detached["attempt"], detached["restarts"]) == ("running", 1, 1), detached
    assert len([p for p in alive(args["run_id"]) if "train.py" in p["cmdline"]]) == 2
    assert "was stopped" in detached["attempts"][0]["cause"]
    rc, output, _stopped = cluster.run({"state": "stopped", "run_id": args["run_id"]})
    assert rc == 0, output
    record = json.loads((cluster.runs_dir / args["run_id"] / "state.json").read_text())
    assert (record["state"], record["restarts"], len(record["attempts"])) == ("stopped", 1, 2), record["msg"]
