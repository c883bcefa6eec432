"""Slurm as the launch reads it (module_utils/_head/slurm.py), the controller's checks of a Slurm launch
(filter launch_problems), and the allocation's plan (_batch_script.for_allocation): pure logic.
Slurm itself is driven in tests/integration/test_slurm.py, on a real slurmctld."""

import pytest

from ansible_collections.torchfleet.cluster.plugins.filter.launch_problems import launch_problems
from ansible_collections.torchfleet.cluster.plugins.module_utils import _batch_script, _launch_plan as lp
from ansible_collections.torchfleet.cluster.plugins.module_utils._head import slurm


@pytest.mark.parametrize("limit", ["90", "30:00", "01:30:00", "1-0", "2-12:00", "1-00:00:00", "UNLIMITED"])
def test_time_limits_sbatch_takes(limit):
    slurm.check_time_limit(limit)


@pytest.mark.parametrize("limit", ["0", "00:00:00", "1h", "-5", "1:2:3:4", "soon", "1-", ""])
def test_time_limits_sbatch_rejects(limit):
    with pytest.raises(slurm.SlurmError, match="is not a Slurm time limit"):
        slurm.check_time_limit(limit)


@pytest.mark.parametrize("limit, minutes", [("90", 90), ("30:30", 30.5), ("01:30:00", 90), ("1-0", 1440),
                                            ("1-01:30", 1530), ("1-00:00:30", 1440.5), ("INFINITE", None)])
def test_minutes_read_each_format(limit, minutes):
    assert slurm.minutes(limit) == minutes


def test_scontrol_records_and_exit_codes():
    info = slurm.fields("JobId=7 JobName=tf-1 JobState=PENDING Reason=Resources ExitCode=0:0 NodeList=(null)")
    assert info["JobState"] == "PENDING" and info["Reason"] == "Resources"
    assert slurm.returncode({"ExitCode": "3:0"}) == 3
    assert slurm.returncode({"ExitCode": "0:15"}) == -15  # ended by SIGTERM, as Popen says it
    assert slurm.returncode({"ExitCode": "0:0"}) == 0


def test_names_with_shell_characters_are_refused():
    with pytest.raises(slurm.SlurmError, match="letters, digits"):
        slurm.check_name("gpu;rm -rf", "slurm_partition")


def test_the_allocation_plan_has_placeholders_and_no_ssh():
    plan = lp.Plan(nodes=(lp.Node("a", "10.0.0.1", 2, "eth0"), lp.Node("b", "10.0.0.2", 2, "eth0")),
                   head="a", script="/s/train.py", run_id="r1", hostfile_path="/runs/r1/hostfile",
                   ssh_control_path="/tmp/tf-ssh-x/%C")
    slurm = _batch_script.for_allocation(plan, "slurm", 3, 2, run_id="r1")
    assert [n.name for n in slurm.nodes] == ["node0", "node1", "node2"] and slurm.head == "node0"
    assert slurm.nodes[0].address == _batch_script.HEAD and slurm.run_id == "r1"
    assert slurm.ssh_control_path is None and slurm.mpirun_extra_args[-3:] == ("--mca", "plm", "slurm")
    argv = lp.render(slurm).argv
    assert not any("plm_rsh_args" in word for word in argv)
    pbs = _batch_script.for_allocation(plan, "pbs", 2, 2)
    assert pbs.run_id == _batch_script.RUN_ID and "plm" not in pbs.mpirun_extra_args


def request(**changes):
    hosts = ["node0", "node1"]
    base = {
        "action": "start", "script": "/", "shared_storage": True,
        "lists": {"script_args": [], "files": [], "env_pass": [], "env_secrets": [], "mpirun_extra_args": []},
        "nproc_per_node": "auto", "master_port": 29500,
        "nodes": [{"inventory_hostname": h, "preflight_net": {}, "python_env_torchrun": "/t"} for h in hosts],
        "log_dir": "~/runs", "group": "cluster", "group_hosts": hosts, "play_hosts": hosts,
        "mode": "torchrun", "head": "node0", "head_torchrun": "/t", "scheduler": "slurm", "tree_spawn": False,
        "slurm": {"partition": "", "account": "", "time_limit": "", "gpus_per_node": 0},
    }
    base.update(changes)
    return base


def test_a_good_slurm_request_has_no_problem():
    assert launch_problems(request()) == []
    assert launch_problems(request(slurm={"partition": "gpu", "account": "p1", "time_limit": "01:00:00",
                                          "gpus_per_node": "4"})) == []


@pytest.mark.parametrize("changes, words", [
    ({"scheduler": "pbs"}, "torchfleet render --format pbs"),
    ({"scheduler": "lsf"}, "give none (mpirun over ssh) or slurm"),
    ({"mode": "mpich"}, "launch_mode=mpich (MPICH's mpiexec) cannot run under it"),
    ({"tree_spawn": "true"}, "tree_spawn cannot apply"),
    ({"slurm": {"time_limit": "1h"}}, "slurm_time_limit '1h' is not a Slurm time limit"),
    ({"slurm": {"partition": "a b"}}, "slurm_partition 'a b' is not a Slurm name"),
    ({"slurm": {"gpus_per_node": "all"}}, "slurm_gpus_per_node is 'all'"),
    ({"scheduler": "none", "slurm": {"partition": "gpu"}}, "slurm_partition given without -e scheduler=slurm"),
])
def test_slurm_requests_refused_on_the_controller(changes, words):
    problems = launch_problems(request(**changes))
    assert any(words in problem for problem in problems), problems


def _fake_slurm(tmp_path, monkeypatch, scancel: str, squeue: str = "exit 0"):
    """scancel and squeue stand-ins on PATH that log their calls (pure logic: the retries and
    the reading; a real slurmctld is in tests/integration/test_slurm.py)."""
    for name, body in (("scancel", scancel), ("squeue", squeue)):
        path = tmp_path / name
        path.write_text(f'#!/bin/sh\necho "$0 $*" >> {tmp_path}/calls\n{body}\n')
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return tmp_path / "calls"


def test_scancel_failures_are_retried_then_reported(tmp_path, monkeypatch):
    calls = _fake_slurm(tmp_path, monkeypatch, 'echo "scancel: error: Unable to contact slurm controller" >&2; exit 1')
    with pytest.raises(slurm.SlurmError, match=r"scancel 42 failed 3 times, the last: scancel: error: Unable to "
                                               r"contact slurm controller; the job may still run"):
        slurm.cancel("42", pause=0.01)
    assert len(calls.read_text().splitlines()) == 3


def test_scancel_succeeds_on_a_retry_and_a_job_slurm_forgot_is_done(tmp_path, monkeypatch):
    # Fails once, then works.
    calls = _fake_slurm(tmp_path, monkeypatch, f'[ -e {tmp_path}/once ] && exit 0; touch {tmp_path}/once; exit 1')
    slurm.cancel("42", pause=0.01)
    assert len(calls.read_text().splitlines()) == 2
    _fake_slurm(tmp_path, monkeypatch, 'echo "scancel: error: Kill job error on job id 42: Invalid job id specified" >&2; exit 1')
    slurm.cancel("42", pause=0.01)


def test_the_jobs_of_runs_are_found_by_name_and_comment(tmp_path, monkeypatch):
    _fake_slurm(tmp_path, monkeypatch, "exit 0",
                "printf '7|tf-20261125-101010-aaaaaa|torchfleet\\n8|my-run|torchfleet\\n9|someone-else|\\n'")
    assert slurm.run_jobs({"my-run"}) == [{"job_id": "8", "run_id": "my-run"}]
    assert [job["job_id"] for job in slurm.run_jobs()] == ["7", "8"]
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert slurm.run_jobs() == []  # no Slurm here
