"""`torchfleet runs`: every account's runs."""

from torchfleet.cli.runs import every_accounts


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
