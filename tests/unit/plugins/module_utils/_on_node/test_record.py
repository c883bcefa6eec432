"""record.py: a run's record (state.json) written whole and read as every reader sees it, the
keys of the record, and the account's index of runs (real files and processes of this machine)."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.torchfleet.cluster.plugins.module_utils import _on_node
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import record as rr
from ansible_collections.torchfleet.cluster.plugins.modules import torchrun_run_info
from torchfleet import run_stream

from run_helpers import running_record


def test_state_is_written_whole_and_a_gone_supervisor_reads_as_lost(tmp_path):
    rr.write_state(str(tmp_path), running_record())
    assert rr.read_state(str(tmp_path))["state"] == "running"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no partial file left
    # A supervisor that died: its pid is gone (or reused by a process that started later).
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    rr.write_state(str(tmp_path), running_record(supervisor_pid=dead.pid, supervisor_start=1))
    assert rr.read_state(str(tmp_path))["state"] == "lost"
    rr.write_state(str(tmp_path), running_record(boot_id="another-boot"))  # the head rebooted
    assert rr.read_state(str(tmp_path))["state"] == "lost"
    rr.write_state(str(tmp_path), running_record(supervisor_pid=dead.pid, state="succeeded", rc=0))
    assert rr.read_state(str(tmp_path))["state"] == "succeeded"  # an ended run stays as it ended


def test_a_supervisor_that_wrote_its_last_record_and_exited_while_it_was_read_is_not_lost(tmp_path, monkeypatch):
    rr.write_state(str(tmp_path), running_record())

    def ended_meanwhile(record):  # the last record written, then the supervisor gone, between read and look
        rr.write_state(str(tmp_path), running_record(state="succeeded", rc=0))
        return False
    monkeypatch.setattr(rr, "supervisor_alive", ended_meanwhile)
    assert rr.read_state(str(tmp_path))["state"] == "succeeded"
    rr.write_state(str(tmp_path), running_record())
    monkeypatch.setattr(rr, "supervisor_alive", lambda record: False)  # gone with the run still running
    assert rr.read_state(str(tmp_path))["state"] == "lost"


def test_list_runs_newest_first_without_runs_that_have_no_record(tmp_path):
    for name, started in (("old", 1.0), ("new", 3.0), ("mid", 2.0)):
        (tmp_path / name).mkdir()
        rr.write_state(str(tmp_path / name), running_record(name, started_at=started, state="succeeded"))
    (tmp_path / "before-records").mkdir()
    assert [r["run_id"] for r in rr.list_runs(str(tmp_path))] == ["new", "mid", "old"]
    assert [r["run_id"] for r in rr.list_runs(str(tmp_path), "mid")] == ["mid"]
    assert rr.list_runs(str(tmp_path), "absent") == []
    assert rr.list_runs(str(tmp_path / "nowhere")) == []
    assert rr.newest_run(str(tmp_path)) == "new"


def test_a_record_of_an_older_run_reads_with_defaults_and_its_unset_keys_stay_out():
    record = rr.RunRecord.from_dict({"run_id": "r0", "state": "failed", "rc": 1, "msg": "m",
                                     "from_a_newer_version": 1})
    assert (record.run_id, record.rc, record.job_id, record.failed_log_tail, record.scheduler) == (
        "r0", 1, None, [], "none")
    assert "job_state" not in record.to_dict()  # an optional key appears once set
    assert record.updated(job_state="PENDING").to_dict()["job_state"] == "PENDING"
    with pytest.raises(TypeError):
        record.updated(no_such_key=1)


def test_the_keys_torchfleet_runs_lists_are_documented_keys_of_the_record():
    documented = set(yaml.safe_load(torchrun_run_info.RETURN)["runs"]["contains"])
    assert set(rr.RunRecord.keys(rr.LISTED)) <= documented <= set(rr.RunRecord.keys())


def test_a_run_whose_head_restarted_reads_as_lost_to_every_reader(tmp_path):
    record = rr.RunRecord(run_id="tf-r", command="c", nodes=["h"], slots=[1], head="h", mode="torchrun", nproc=1,
                          world_size=2, started="t", started_at=1.0, log_dir=str(tmp_path), launcher_log="l",
                          supervisor_pid=os.getpid(), supervisor_start=rr.process_start(os.getpid()),
                          boot_id="another-boot", msg="run tf-r is running")
    rr.write_state(str(tmp_path), record.to_dict())
    read = rr.read_state(str(tmp_path))
    assert read["state"] == "lost"
    assert read["msg"].startswith("run tf-r is lost: its supervisor is gone (the head restarted)")
    out, err = run_stream.end_report(read, "h")
    assert out == [f"run tf-r: rc -, world size 2, - s, lost, logs in {tmp_path} on h"]
    assert "is running" not in " ".join(out + err)


def test_the_follower_of_an_earlier_version_asking_record_py_to_serve_is_told_why(tmp_path):
    # Before the line server had a file of its own, the follower ran the run's record.py on each
    # other node to read its worker files: a node it cannot read is named with these words.
    done = subprocess.run([sys.executable, "-S", "-c", _on_node.source("record"), "serve", str(tmp_path), "now"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1].startswith("this run's head package serves worker files with line_server.py")


def _record(run_dir, run_id, started_at):
    run_dir.mkdir(parents=True)
    rr.write_state(str(run_dir), {"run_id": run_id, "state": "succeeded", "started_at": started_at})


def test_a_run_with_a_log_dir_of_its_own_is_found_through_the_index(tmp_path):
    runs, index = tmp_path / "runs", tmp_path / "index"
    _record(runs / "tf-a", "tf-a", 1.0)
    _record(tmp_path / "shared" / "tf-b", "tf-b", 2.0)
    rr.index_run(str(index), "tf-a", str(runs / "tf-a"))
    rr.index_run(str(index), "tf-b", str(tmp_path / "shared" / "tf-b"))
    rr.index_run(str(index), "tf-gone", str(tmp_path / "removed" / "tf-gone"))  # its directory removed by hand
    assert [r["run_id"] for r in rr.list_runs(str(runs), index=str(index))] == ["tf-b", "tf-a"]
    assert [r["run_id"] for r in rr.list_runs(str(runs))] == ["tf-a"]  # without the index: log_dir alone
    assert rr.run_dir_of(str(runs), "tf-b", str(index)) == str(tmp_path / "shared" / "tf-b")
    assert rr.run_dir_of(str(runs), "tf-a", str(index)) == str(runs / "tf-a")
    assert rr.run_dir_of(str(runs), "tf-gone", str(index)) == str(runs / "tf-gone")
    assert rr.list_runs(str(runs), "tf-b", str(index))[0]["run_id"] == "tf-b"
    # Indexed again (a restart's directory): the link is replaced, never doubled.
    rr.index_run(str(index), "tf-b", str(tmp_path / "shared" / "tf-b"))
    assert sorted(os.listdir(index)) == ["tf-a", "tf-b", "tf-gone"]


def test_the_index_read_is_that_of_the_account_whose_runs_they_are(tmp_path):
    import getpass

    me = getpass.getuser()
    assert rr.runs_index() == os.path.expanduser("~/.local/state/torchfleet/runs")
    assert rr.runs_index("torchfleet") == os.path.expanduser("~torchfleet/.local/state/torchfleet/runs")
    assert rr.owner_of("~torchfleet/torchfleet/runs/tf-1") == "torchfleet"
    assert rr.owner_of("~/torchfleet/runs") == ""
    # A path: the owner of its nearest directory that exists (root reading another account's runs).
    assert rr.owner_of(str(tmp_path / "runs" / "tf-1")) == me


def test_run_json_holds_the_request_whole_and_reads_back_as_the_same_class(tmp_path, supervisor_plan):
    plan = supervisor_plan(max_restarts=2, env_secrets={"WANDB_API_KEY": "s3cret"}, fewest_nodes=1)
    (tmp_path / rr.PLAN_FILE).write_text(plan.to_json())
    assert "s3cret" not in (tmp_path / rr.PLAN_FILE).read_text()
    again = rr.SupervisorPlan.read(str(tmp_path))
    assert (again.request.max_restarts, again.request.env_secrets, again.fewest_nodes) == (
        2, {"WANDB_API_KEY": "<redacted>"}, 1)
    assert type(again.request) is type(plan.request) and again.request == plan.request
    assert again.head == plan.head == "n0" and again.to_json() == plan.to_json()
    # The follower reads run.json as plain JSON: the request's options under `request`, or at the
    # top in a run.json an older torchfleet wrote.
    assert rr.request_value(json.loads(plan.to_json()), "head") == "n0"
    assert rr.request_value({"head": "n1", "scheduler": "slurm"}, "scheduler") == "slurm"


def test_a_run_json_without_a_request_is_named_as_an_older_torchfleets(tmp_path):
    (tmp_path / rr.PLAN_FILE).write_text(json.dumps({"run_id": "r1", "head": "n0", "mode": "torchrun"}))
    with pytest.raises(rr.OlderPlan, match="keeps no launch request: an older torchfleet wrote it"):
        rr.SupervisorPlan.read(str(tmp_path))
