"""_on_node/slurm_job.py: a run's Slurm job as the supervisor waits for it (a Popen's wait and
returncode), what its record says of the job, its cancel, and a restart's new job (next_job).
Slurm's answers are stand-ins (slurm.job, slurm.hostnames, slurm.cancel); a real slurmctld is in
tests/integration/test_slurm.py."""

import signal
import subprocess
from types import SimpleNamespace

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import slurm, slurm_job
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import Node
from plan_helpers import plan_of


class Keeper:
    """The run's RecordKeeper: what the job wrote in the record, in order."""

    def __init__(self):
        self.launched_with, self.updates = None, []

    def launched(self, **changes):
        self.launched_with = changes

    def update(self, **changes):
        self.updates.append(changes)


def a_run(tmp_path, mapped=None, attempts=None):
    plan = SimpleNamespace(run_id="r1", sbatch=["/usr/bin/sbatch", "--parsable", "--exclude=old", "--open-mode=truncate",
                                                "--comment=torchfleet", "/runs/r1/job.sbatch"], cwd="/work",
                           batch={"slots": 2, "gpus_per_node": 2, "walltime": "01:00:00", "queue": "gpu",
                                  "account": None, "whole_nodes": True,
                                  "extra_args": ["--qos=high", "--exclude=gpu[07-08]"]})
    run = SimpleNamespace(plan=plan, keeper=Keeper(), slurm_names={}, attempts=attempts if attempts is not None else [],
                          run_dir=str(tmp_path), allocations=[])

    def nodes_of_allocation(names):
        run.allocations.append(names)
        return dict(mapped) if mapped else {}
    run.nodes_of_allocation = nodes_of_allocation
    return run


@pytest.fixture
def scontrol(monkeypatch):
    """slurm.job's answers, one per question (the last repeats); slurm.hostnames expands 'c[1-2]'."""
    state = SimpleNamespace(answers=[{}], asked=0)

    def job(job_id):
        assert job_id == "77"
        state.asked += 1
        return state.answers.pop(0) if len(state.answers) > 1 else state.answers[0]
    monkeypatch.setattr(slurm, "job", job)
    monkeypatch.setattr(slurm, "hostnames", lambda names: {"c[1-2]": ["c1", "c2"], "c2": ["c2"]}.get(names, []))
    return state


def new_job(run):
    job = slurm_job.SlurmJob(run)
    job.job_id, job.POLL = "77", 0.0
    return job


def test_submit_records_the_job_as_pending(tmp_path, monkeypatch):
    run = a_run(tmp_path)
    monkeypatch.setattr(slurm, "submit", lambda argv, env, cwd: (argv, env, cwd) == (run.plan.sbatch, {"A": "1"}, "/work")
                        and "77")
    job = slurm_job.SlurmJob(run)
    job.submit({"A": "1"})
    assert job.job_id == "77"
    assert run.keeper.launched_with == {"job_id": "77", "job_state": "PENDING",
                                        "msg": "run r1 is Slurm job 77, submitted"}


def test_a_pending_job_times_out_as_a_popen_does_and_its_reason_is_recorded_once(tmp_path, scontrol):
    run = a_run(tmp_path)
    job = new_job(run)
    scontrol.answers = [{"JobState": "PENDING", "Reason": "Resources"}]
    for _attempt in range(2):
        with pytest.raises(subprocess.TimeoutExpired):
            job.wait(1)
    assert job.returncode is None and not job.started
    assert run.keeper.updates == [{"job_state": "PENDING", "job_reason": "Resources",
                                   "msg": "run r1 is Slurm job 77: PENDING (Resources)"}]
    scontrol.answers = [{"JobState": "PENDING", "Reason": "None"}]
    with pytest.raises(subprocess.TimeoutExpired):
        job.wait(1)
    assert run.keeper.updates[-1]["msg"] == "run r1 is Slurm job 77: PENDING"


def test_slurm_is_asked_at_most_once_a_poll(tmp_path, scontrol, monkeypatch):
    job = new_job(a_run(tmp_path))
    job.POLL = 3600.0
    slept = []
    monkeypatch.setattr(slurm_job.time, "sleep", slept.append)
    for _attempt in range(3):
        with pytest.raises(subprocess.TimeoutExpired):
            job.wait(0.5)
    assert scontrol.asked == 1 and slept == [0.5, 0.5]


@pytest.mark.parametrize("info, code", [
    ({"JobState": "COMPLETED", "ExitCode": "0:0"}, 0),
    ({"JobState": "FAILED", "ExitCode": "3:0"}, 3),
    ({"JobState": "CANCELLED", "ExitCode": "0:15"}, -15),
    (None, 1),  # Slurm forgot the job: it ended, how is not known
])
def test_an_ended_job_gives_its_returncode(tmp_path, scontrol, info, code):
    job = new_job(a_run(tmp_path))
    scontrol.answers = [info]
    assert job.wait(1) == code and job.returncode == code


def test_an_unanswered_question_keeps_the_last_answer(tmp_path, scontrol):
    job = new_job(a_run(tmp_path))
    scontrol.answers = [{"JobState": "RUNNING", "NodeList": "c2"}, {}]
    for _attempt in range(2):
        with pytest.raises(subprocess.TimeoutExpired):
            job.wait(1)
    assert job.latest == {"JobState": "RUNNING", "NodeList": "c2"} and job.returncode is None


def test_a_running_job_records_its_nodes_in_rank_order_once(tmp_path, scontrol):
    attempts = [{"attempt": 0, "nodes": ["a", "b"]}]
    run = a_run(tmp_path, mapped={"nodes": ["b", "a"], "slots": [2, 2]}, attempts=attempts)
    job = new_job(run)
    scontrol.answers = [{"JobState": "RUNNING", "Reason": "None", "BatchHost": "c1", "NodeList": "c[1-2]"},
                        {"JobState": "COMPLETING", "Reason": "None", "NodeList": "c[1-2]"}]
    for _attempt in range(2):
        with pytest.raises(subprocess.TimeoutExpired):
            job.wait(1)
    assert job.started and run.allocations == [["c1", "c2"]]  # asked once
    first, second = run.keeper.updates
    assert first["batch_host"] == "c1" and first["job_nodes"] == ["c1", "c2"]
    assert first["nodes"] == ["b", "a"] and first["slots"] == [2, 2]
    assert run.slurm_names == {"b": "c1", "a": "c2"}
    assert attempts[0] == {"attempt": 0, "nodes": ["b", "a"], "job_id": "77", "job_nodes": ["c1", "c2"]}
    assert first["attempts"] is attempts
    assert set(second) == {"job_state", "job_reason", "msg"}


def test_nodes_that_do_not_map_keep_the_attempts_own(tmp_path, scontrol):
    attempts = [{"attempt": 1, "nodes": ["a", "b"]}]
    run = a_run(tmp_path, attempts=attempts)
    job = new_job(run)
    job.update({"JobState": "RUNNING", "NodeList": "c[1-2]"})
    assert run.slurm_names == {} and attempts[0]["nodes"] == ["a", "b"] and attempts[0]["job_nodes"] == ["c1", "c2"]
    assert "nodes" not in run.keeper.updates[0]


@pytest.mark.parametrize("info, started", [
    ({"JobState": "CANCELLED", "RunTime": "00:00:00"}, False),  # cancelled while pending: never ran
    ({"JobState": "CANCELLED"}, False),
    ({"JobState": "FAILED", "RunTime": "00:00:05"}, True),
    ({"JobState": "SUSPENDED"}, True),
    ({"JobState": "CONFIGURING"}, False),
])
def test_a_job_started_only_once_it_ran(tmp_path, scontrol, info, started):
    run = a_run(tmp_path)
    job = new_job(run)
    job.update(info)
    assert job.started is started and ("job_nodes" in run.keeper.updates[0]) is started


@pytest.fixture
def clock(monkeypatch):
    state = SimpleNamespace(now=100.0)
    monkeypatch.setattr(slurm_job.time, "monotonic", lambda: state.now)
    return state


def test_cancel_waits_until_slurm_says_the_job_is_over(tmp_path, scontrol, monkeypatch):
    cancelled = []
    monkeypatch.setattr(slurm, "cancel", cancelled.append)
    job = new_job(a_run(tmp_path))
    scontrol.answers = [{"JobState": "RUNNING"}, {"JobState": "COMPLETING"}, {"JobState": "CANCELLED", "ExitCode": "0:15"}]
    assert job.cancel(10) is None
    assert cancelled == ["77"] and job.returncode == -15 and scontrol.asked == 3


def test_cancel_that_slurm_refuses_is_a_kill_and_a_warning(tmp_path, scontrol, monkeypatch):
    def refuses(job_id):
        raise slurm.SlurmError("scancel 77 failed 3 times")
    monkeypatch.setattr(slurm, "cancel", refuses)
    job = new_job(a_run(tmp_path))
    assert job.cancel(10) == "scancel 77 failed 3 times"
    assert job.returncode == -signal.SIGKILL and scontrol.asked == 0


def test_cancel_ends_when_only_the_lost_nodes_are_still_held(tmp_path, scontrol, monkeypatch):
    monkeypatch.setattr(slurm, "cancel", lambda job_id: None)
    job = new_job(a_run(tmp_path))
    scontrol.answers = [{"JobState": "COMPLETING", "NodeList": "c[1-2]"}, {"JobState": "COMPLETING", "NodeList": "c2"}]
    assert job.cancel(10, lost=["c2"]) is None
    assert job.returncode == -signal.SIGTERM and scontrol.asked == 2


def test_cancel_gives_up_after_the_grace_and_a_minute(tmp_path, scontrol, clock, monkeypatch):
    monkeypatch.setattr(slurm, "cancel", lambda job_id: None)
    job = new_job(a_run(tmp_path))
    scontrol.answers = [{"JobState": "COMPLETING", "NodeList": "c[1-2]"}]

    def asked(job_id):
        clock.now += 20
        return {"JobState": "COMPLETING", "NodeList": "c[1-2]"}
    monkeypatch.setattr(slurm, "job", asked)
    said = job.cancel(10, lost=["c2"])  # c1 is held too: not only lost nodes
    assert said == "Slurm job 77 was cancelled but still not over after 70 s: check it with squeue -j 77"
    assert job.returncode == -signal.SIGKILL and clock.now == 180.0


def test_next_job_writes_the_attempts_script_and_excludes_the_lost_nodes(tmp_path):
    run = a_run(tmp_path)
    run.slurm_names = {"b": "c2", "a": "c1", "z": "c9"}
    plan = plan_of(nodes=(Node("a", "10.0.0.1", 2, "eth0"), Node("c", "10.0.0.3", 2, "eth0")), head="a",
                   script="/s/train.py", run_id="r1", hostfile_path=f"{tmp_path}/hostfile.2", port=29502)
    argv = slurm_job.next_job(run, 2, plan, ["z", "b", "unmapped"])
    path = f"{tmp_path}/job.2.sbatch"
    assert argv == ["/usr/bin/sbatch", "--parsable", "--comment=torchfleet", "--exclude=gpu[07-08],c2,c9",
                    "--open-mode=append", path]
    script = open(path, encoding="utf-8").read()
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --job-name=r1\n" in script
    assert "#SBATCH --partition=gpu\n" in script and "#SBATCH --gpus-per-node=2\n" in script
    assert "#SBATCH --qos=high\n" in script and "--exclude" not in script  # sbatch's own --exclude overrides it
    assert "run_id=r1\n" in script and "29502" in script and "torchfleet.cluster.torchrun_launch" in script
    assert run.plan.batch["extra_args"] == ["--qos=high", "--exclude=gpu[07-08]"]  # the run's options unchanged


def test_next_job_without_exclusions_passes_none(tmp_path):
    run = a_run(tmp_path)
    run.plan.batch["extra_args"] = []
    plan = plan_of(nodes=(Node("a", "10.0.0.1", 2, "eth0"),), head="a", script="/s/train.py", run_id="r1",
                   hostfile_path=f"{tmp_path}/hostfile.1")
    argv = slurm_job.next_job(run, 1, plan, [])
    assert not any(arg.startswith("--exclude") for arg in argv)
    assert argv[-2:] == ["--open-mode=append", f"{tmp_path}/job.1.sbatch"]
