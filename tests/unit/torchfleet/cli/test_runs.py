"""`torchfleet runs`: every account's runs."""

from torchfleet.cli.runs import every_accounts, progress_lines


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
