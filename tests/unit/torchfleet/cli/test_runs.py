"""`torchfleet runs`: every account's runs; --prune."""

import getpass
import json
import sys

import pytest

from cli_helpers import run_cli, write_inventory
from torchfleet.cli.runs import every_accounts, progress_lines
from torchfleet.node_values import NodeValueError, run_record


def test_runs_of_every_account_join_the_board_and_slurms_queue_once_each():
    own = [{"run_id": "tf-mine", "state": "running", "started": "2026-11-27T01:00:00+00:00"}]
    found = {"user": "alice",
             "others": [{"run_id": "tf-bobs", "account": "bob", "state": "running", "started": "2026-11-27T02:00:00+00:00",
                         "world_size": 3}],
             "jobs": [{"job_id": "7", "name": "tf-bobs", "user": "bob", "state": "RUNNING", "submitted": "2026-11-27T01:59:00"},
                      {"job_id": "8", "name": "bert.sh", "user": "carol", "state": "PENDING", "submitted": "2026-11-27T03:00:00"},
                      {"job_id": "6", "name": "tf-mine", "user": "alice", "state": "RUNNING", "submitted": "2026-11-27T00:59:00"}]}
    every = every_accounts(own, found)
    assert [(run["run_id"], run["account"], run["state"], run.get("job_id")) for run in every] == [
        ("bert.sh", "carol", "pending", "8"),  # a job torchfleet did not submit, from squeue
        ("tf-bobs", "bob", "running", "7"),    # from the board, with its job
        ("tf-mine", "alice", "running", "6")]   # this account's record, its job from the queue


def _progress(ages, now=1_000_000.0, hang_after=60, steps=None):
    from datetime import datetime, timezone
    return {"hang_after": hang_after,
            "ranks": {str(rank): {"node": f"n{rank // 2}", "last": datetime.fromtimestamp(now - age, timezone.utc).isoformat(),
                                  **({"step": steps[rank]} if steps else {})}
                      for rank, age in enumerate(ages)}}


def test_status_shows_each_ranks_progress_age_and_marks_a_stall_past_half_the_timeout():
    lines = progress_lines(_progress([2, 3, 40, 2], steps=[20, 20, 19, 20]), 1_000_000.0)
    assert lines[0] == "progress:          newest 2 s ago; hung after 60 s without"
    assert lines[1:] == ["  rank 0 on n0: 2 s ago, step 20", "  rank 1 on n0: 3 s ago, step 20",
                         "  rank 2 on n1: 40 s ago, step 19  stalled?", "  rank 3 on n1: 2 s ago, step 20"]
    assert progress_lines(_progress([35, 40]), 1_000_000.0)[0].endswith("(stalled?)")
    assert "hung after never" in progress_lines(_progress([1], hang_after=None), 1_000_000.0)[0]


def test_status_shows_many_ranks_per_node_by_its_oldest_rank():
    lines = progress_lines(_progress([1] * 20 + [50, 1]), 1_000_000.0)
    assert len(lines) == 1 + 11 and "  n10 (rank 20, its oldest): 50 s ago  stalled?" in lines, lines


def test_status_shows_each_ranks_step_rate_and_names_the_stragglers():
    progress = _progress([1, 1], steps=[90, 30])
    progress["ranks"]["0"]["rate"], progress["ranks"]["1"]["rate"] = 2.0, 0.5
    progress["stragglers"] = {"1": "rank 1 on n0: 0.50 steps/s over its last 30 s, the others 2.00 (their median)"}
    lines = progress_lines(progress, 1_000_000.0)
    assert lines[1:] == ["  rank 0 on n0: 1 s ago, step 90, 2.0 steps/s", "  rank 1 on n0: 1 s ago, step 30, 0.5 steps/s",
                         "  straggler: rank 1 on n0: 0.50 steps/s over its last 30 s, the others 2.00 (their median)"]


def _plant_run(runs, name, started_at, **record):
    run_dir = runs / name
    run_dir.mkdir(parents=True)
    (run_dir / "state.json").write_text(json.dumps(
        {"run_id": name, "state": "succeeded", "started_at": started_at, "log_dir": str(run_dir), **record}))
    return run_dir


def test_prune_never_runs_what_a_record_on_a_node_says(tmp_path, monkeypatch, capsys):
    """Issue 60: the training account plants records whose log_dir, or run id, is a template; the
    real `runs --prune` (its ad-hoc calls of Ansible, here against this machine) runs neither."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))  # the account's index of runs, for torchrun_prune
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    log_dir = tmp_path / "runs"
    _plant_run(log_dir, "tf-20260105-000000-abcdef", 5)  # the newest: kept
    # The reported record (its log_dir), and a run whose very id is a template (cd: to HOME).
    _plant_run(log_dir, "tf-20260101-000000-abcdef", 4,
               log_dir=f"{{{{ lookup('pipe', 'id > {tmp_path}/pwned_by_log_dir') }}}}")
    _plant_run(log_dir, "{{ lookup('pipe', 'cd; id > pwned_by_run_id') }}", 3)
    old = _plant_run(log_dir, "tf-20260102-000000-abcdef", 1)  # a real run to prune
    write_inventory(tmp_path / "hosts.yml", {"node0": {
        "ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable}},
        cluster_user_name=getpass.getuser(), log_dir=str(log_dir))

    rc, out, err = run_cli(capsys, "runs", "--prune", "--keep", "1", "-i", "hosts.yml")
    assert not list(tmp_path.glob("pwned*")), "a record's value ran on the controller"
    assert rc == 0, err
    assert out == "torchfleet: pruned 1 run(s): tf-20260102-000000-abcdef\n"
    assert not old.exists() and (log_dir / "tf-20260105-000000-abcdef").is_dir()
    assert "left alone, not as torchfleet writes it: the record of run 'tf-20260101-000000-abcdef': log_dir" in err
    assert "left alone, not as torchfleet writes it: the record of run \"{{ lookup('pipe'" in err


def test_records_are_checked_to_shape():
    assert run_record({"run_id": "tf-1", "started_at": 1.5, "log_dir": "/home/a b/runs/tf-1"})["run_id"] == "tf-1"
    for bad in ({"run_id": "a/../b"}, {"run_id": "tf-1", "started_at": "1"}, {"run_id": "tf-1", "started_at": True},
                {"run_id": "tf-1", "log_dir": "runs/tf-1"}, {"run_id": "tf-1", "log_dir": "/x/../tf-1"},
                {"run_id": "tf-1", "log_dir": "/x/{{ 1 }}/tf-1"}, {"run_id": "tf-1", "log_dir": "/x/#jinja2:/tf-1"},
                {"run_id": "tf-1", "log_dir": "/x/\x1b]0;t\x07/tf-1"}, ["tf-1"]):
        with pytest.raises(NodeValueError):
            run_record(bad)
