"""_on_node/slurm.py: Slurm as the launch reads and drives it on the head (time limits, names,
partitions, a job's record and exit, submitting, cancelling, the queue). Slurm's commands are
stand-ins on PATH that log their calls; a real slurmctld is in tests/integration/test_slurm.py."""

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import slurm


@pytest.mark.parametrize("limit", ["90", "30:00", "01:30:00", "1-0", "2-12:00", "1-00:00:00", "UNLIMITED",
                                   "infinite", " 90 "])
def test_time_limits_sbatch_takes(limit):
    slurm.check_time_limit(limit)


@pytest.mark.parametrize("limit", ["0", "00:00:00", "1h", "-5", "1:2:3:4", "soon", "1-", "", "0-00:00"])
def test_time_limits_sbatch_rejects(limit):
    with pytest.raises(slurm.SlurmError, match="is not a Slurm time limit"):
        slurm.check_time_limit(limit)


@pytest.mark.parametrize("limit, minutes", [("90", 90), ("30:30", 30.5), ("01:30:00", 90), ("1-0", 1440),
                                            ("1-01:30", 1530), ("1-00:00:30", 1440.5), ("2-12", 3600),
                                            ("INFINITE", None), (" unlimited ", None)])
def test_minutes_read_each_format(limit, minutes):
    assert slurm.minutes(limit) == minutes


def test_scontrol_records_and_exit_codes():
    info = slurm.fields("JobId=7 JobName=tf-1 JobState=PENDING Reason=Resources ExitCode=0:0 NodeList=(null)")
    assert info["JobState"] == "PENDING" and info["Reason"] == "Resources"
    assert slurm.returncode({"ExitCode": "3:0"}) == 3
    assert slurm.returncode({"ExitCode": "0:15"}) == -15  # ended by SIGTERM, as Popen says it
    assert slurm.returncode({"ExitCode": "0:0"}) == 0


# Every state Slurm ends a job in: the run's record state, the exit code `wait` gives, and whether
# a restart can help. COMPLETED and FAILED are read from the ranks (None here), as any launcher's.
@pytest.mark.parametrize("job_state, expected", [
    ("COMPLETED", None), ("FAILED", None),
    ("TIMEOUT", ("timed_out", 124, False)), ("DEADLINE", ("timed_out", 124, False)),
    ("NODE_FAIL", ("failed", 1, True)), ("BOOT_FAIL", ("failed", 1, True)), ("PREEMPTED", ("failed", 1, True)),
    ("CANCELLED", ("stopped", 143, False)), ("OUT_OF_MEMORY", ("failed", 137, False)),
    ("SPECIAL_EXIT", ("failed", 1, False)), ("RUNNING", None), ("PENDING", None)])
@pytest.mark.parametrize("exit_code", ["0:0", "0:15", "1:0"])
def test_every_ended_state_is_the_records_whatever_the_exit_code(job_state, expected, exit_code):
    said = slurm.verdict({"JobState": job_state, "Reason": "TimeLimit", "ExitCode": exit_code, "NodeList": "n[0-1]"}, "7")
    assert (None if said is None else (said["state"], said["rc"], said["restart"])) == expected
    if said:
        assert said["msg"].startswith(f"Slurm ended job 7: {job_state} (TimeLimit): ") and "(nodes n[0-1])" in said["msg"]
    assert set(slurm.VERDICTS) | {"COMPLETED", "FAILED"} == slurm.ENDED


def test_nodes_slurm_gives_no_job_are_named_with_their_state_and_reason(tmp_path, monkeypatch):
    shown = ("NodeName=n0 Arch=x86_64 State=IDLE Reason=(null)\\n"
             "NodeName=n1 State=DOWN+NOT_RESPONDING Reason=failed [root@2026-11-29T01:00:00]\\n"
             "NodeName=n2 State=MIXED+DRAIN Reason=disk\\nNodeName=n3 State=ALLOCATED+COMPLETING\\n")
    _fake(tmp_path, monkeypatch, scontrol=f'case "$2" in node) printf "{shown}";; hostnames) echo n0 n1 n2;; esac')
    assert slurm.unusable_nodes() == {"n1": "DOWN+NOT_RESPONDING (failed)", "n2": "MIXED+DRAIN (disk)"}
    said = slurm.verdict({"JobState": "NODE_FAIL", "Reason": "NodeDown", "NodeList": "n[0-2]"}, "7")
    assert said["msg"].endswith("(nodes n[0-2]); n1 is DOWN+NOT_RESPONDING (failed), n2 is MIXED+DRAIN (disk)"), said
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert slurm.unusable_nodes() == {}  # no Slurm here: nothing known to leave out


def test_fields_keep_the_first_value_of_a_key_and_skip_bare_words():
    info = slurm.fields("JobId=7 Command=/a/b=c flag JobId=8 Empty=")
    assert info == {"JobId": "7", "Command": "/a/b=c", "Empty": ""}
    assert slurm.fields("") == {}


@pytest.mark.parametrize("info, code", [({}, 0), ({"ExitCode": "2:9"}, 2), ({"ExitCode": "0:9"}, -9),
                                        ({"ExitCode": ":"}, 0), ({"ExitCode": "1"}, 1)])
def test_returncode_prefers_the_exit_code_to_the_signal(info, code):
    assert slurm.returncode(info) == code


def test_names_with_shell_characters_are_refused():
    with pytest.raises(slurm.SlurmError, match="letters, digits"):
        slurm.check_name("gpu;rm -rf", "slurm_partition")
    with pytest.raises(slurm.SlurmError, match="slurm_account '' is not a Slurm name"):
        slurm.check_name("", "slurm_account")
    slurm.check_name("gpu-a100_v2.1", "slurm_partition")


def _fake(tmp_path, monkeypatch, **bodies):
    """Stand-ins of Slurm's commands ({name: sh body}) on PATH, each logging its arguments."""
    for name, body in bodies.items():
        path = tmp_path / name
        path.write_text(f'#!/bin/sh\necho "$0 $*" >> {tmp_path}/calls\n{body}\n')
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return tmp_path / "calls"


def _fake_slurm(tmp_path, monkeypatch, scancel: str, squeue: str = "exit 0"):
    return _fake(tmp_path, monkeypatch, scancel=scancel, squeue=squeue)


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


def test_scancel_silent_failure_names_its_exit_and_a_missing_scancel_names_the_fix(tmp_path, monkeypatch):
    _fake_slurm(tmp_path, monkeypatch, "exit 4")
    with pytest.raises(slurm.SlurmError, match="failed 2 times, the last: exit 4"):
        slurm.cancel("42", tries=2, pause=0.01)
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    with pytest.raises(slurm.SlurmError, match="scancel cannot run on this node .*cancel job 42 from a node"):
        slurm.cancel("42", pause=0.01)


def test_the_jobs_of_runs_are_found_by_name_and_comment(tmp_path, monkeypatch):
    _fake_slurm(tmp_path, monkeypatch, "exit 0",
                "printf '7|tf-20261125-101010-aaaaaa|torchfleet\\n8|my-run|torchfleet\\n9|someone-else|\\n'")
    assert slurm.run_jobs({"my-run"}) == [{"job_id": "8", "run_id": "my-run"}]
    assert [job["job_id"] for job in slurm.run_jobs()] == ["7", "8"]
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert slurm.run_jobs() == []  # no Slurm here


def test_the_queue_lists_every_accounts_jobs_and_marks_torchfleets(tmp_path, monkeypatch):
    calls = _fake(tmp_path, monkeypatch, squeue=(
        "printf '7|ann|RUNNING|2026-11-25T10:10:10|torchfleet|tf-1\\n"
        "8|bob|PENDING|2026-11-25T10:11:00||a|b\\nnot a job line\\n'"))
    assert slurm.queue() == [
        {"job_id": "7", "name": "tf-1", "user": "ann", "state": "RUNNING", "submitted": "2026-11-25T10:10:10",
         "torchfleet": True},
        # A job name may hold '|': the last field takes the rest.
        {"job_id": "8", "name": "a|b", "user": "bob", "state": "PENDING", "submitted": "2026-11-25T10:11:00",
         "torchfleet": False}]
    assert "--me" not in calls.read_text()
    _fake(tmp_path, monkeypatch, squeue="echo '7|ann|RUNNING|x|torchfleet|tf-1'; exit 1")
    assert slurm.queue() == []  # squeue failed: what it printed does not count
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert slurm.queue() == []


PARTITIONS = ("PartitionName=debug AllowGroups=ALL Default=YES State=UP TotalNodes=2 MaxTime=01:00:00\n"
              "PartitionName=gpu Default=NO State=UP TotalNodes=8 MaxTime=UNLIMITED\n"
              "PartitionName=old Default=NO State=DRAIN TotalNodes=4 MaxTime=1-00:00:00\n")


def _scontrol(tmp_path, monkeypatch, partitions=PARTITIONS, rc=0):
    (tmp_path / "partitions").write_text(partitions)
    return _fake(tmp_path, monkeypatch, scontrol=f"cat {tmp_path}/partitions; exit {rc}")


def test_partitions_are_read_by_name(tmp_path, monkeypatch):
    calls = _scontrol(tmp_path, monkeypatch, PARTITIONS + "no partition on this line\n")
    found = slurm.partitions()
    assert sorted(found) == ["debug", "gpu", "old"]
    assert found["debug"]["Default"] == "YES" and found["old"]["State"] == "DRAIN"
    assert calls.read_text().split()[1:] == ["show", "partition", "-o"]


def test_partitions_unreadable_name_the_fix(tmp_path, monkeypatch):
    _fake(tmp_path, monkeypatch, scontrol="echo 'slurm_load_partitions: Unable to contact slurm controller' >&2; exit 1")
    with pytest.raises(slurm.SlurmError, match=r"cannot read the partitions \(slurm_load_partitions: Unable to "
                                               r"contact slurm controller\): is slurmctld running"):
        slurm.partitions()


@pytest.mark.parametrize("name, nodes, limit, partition", [
    (None, 2, None, "debug"),  # the default one
    ("", 1, "30", "debug"),
    ("debug", 2, "01:00:00", "debug"),  # at its limit exactly
    ("gpu", 8, "7-00:00:00", "gpu"),  # no limit
    ("gpu", 3, "UNLIMITED", "gpu"),
])
def test_the_partition_a_job_goes_to(tmp_path, monkeypatch, name, nodes, limit, partition):
    _scontrol(tmp_path, monkeypatch)
    assert slurm.check_partition(name, nodes, limit) == partition


@pytest.mark.parametrize("name, nodes, limit, words", [
    ("nope", 1, None, "Slurm has no partition 'nope' (it has debug, gpu, old)"),
    ("a;b", 1, None, "slurm_partition 'a;b' is not a Slurm name"),
    ("old", 1, None, "Slurm partition old is DRAIN: no job would start"),
    (None, 3, None, "the launch needs 3 nodes, Slurm partition debug has 2"),
    ("debug", 1, "61", "slurm_time_limit 61 is above partition debug's limit 01:00:00; give 01:00:00 or less"),
    ("debug", 1, "UNLIMITED", "slurm_time_limit UNLIMITED is above partition debug's limit"),
])
def test_partitions_refused_before_anything_is_submitted(tmp_path, monkeypatch, name, nodes, limit, words):
    _scontrol(tmp_path, monkeypatch)
    with pytest.raises(slurm.SlurmError) as raised:
        slurm.check_partition(name, nodes, limit)
    assert words in str(raised.value)


def test_no_default_partition_names_those_there_are(tmp_path, monkeypatch):
    _scontrol(tmp_path, monkeypatch, PARTITIONS.replace("Default=YES", "Default=NO"))
    with pytest.raises(slurm.SlurmError, match=r"no default partition: name one in slurm_partition \(debug, gpu, old\)"):
        slurm.check_partition(None, 1, None)
    _scontrol(tmp_path, monkeypatch, "")
    with pytest.raises(slurm.SlurmError, match=r"\(none\)"):
        slurm.check_partition(None, 1, None)


def test_submit_returns_the_job_id_or_what_sbatch_said(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    calls = _fake(tmp_path, monkeypatch, sbatch=f"pwd > {tmp_path}/cwd; echo \"$TF\" > {tmp_path}/env; echo '123;cluster1'",
                  refuses="echo 'sbatch: error: first' >&2; echo 'sbatch: error: Invalid account' >&2; exit 1",
                  silent="exit 3")
    # --parsable prints JOB_ID[;CLUSTER]
    assert slurm.submit([str(tmp_path / "sbatch"), "--parsable", "job.sbatch"], {"PATH": "/usr/bin:/bin", "TF": "x"},
                        str(tmp_path / "sub")) == "123"
    assert calls.read_text().split()[1:] == ["--parsable", "job.sbatch"]
    assert (tmp_path / "cwd").read_text().strip() == str(tmp_path / "sub") and (tmp_path / "env").read_text() == "x\n"
    with pytest.raises(slurm.SlurmError, match="^sbatch refused the job: sbatch: error: Invalid account$"):
        slurm.submit([str(tmp_path / "refuses")], {}, None)
    with pytest.raises(slurm.SlurmError, match="^sbatch refused the job: exit 3$"):
        slurm.submit([str(tmp_path / "silent")], {}, None)


def test_a_job_as_scontrol_shows_it_or_none_once_slurm_forgot_it(tmp_path, monkeypatch):
    _fake(tmp_path, monkeypatch, scontrol="echo 'JobId=5 JobState=RUNNING ExitCode=0:0'")
    assert slurm.job("5") == {"JobId": "5", "JobState": "RUNNING", "ExitCode": "0:0"}
    _fake(tmp_path, monkeypatch, scontrol="echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1")
    assert slurm.job("5") is None
    _fake(tmp_path, monkeypatch, scontrol="echo 'Socket timed out on send/recv operation' >&2; exit 1")
    assert slurm.job("5") == {}  # not known now: asked again later


def test_hostnames_expand_slurms_node_list(tmp_path, monkeypatch):
    calls = _fake(tmp_path, monkeypatch, scontrol="printf 'node0\\nnode1\\nnode2\\n'")
    assert slurm.hostnames("node[0-2]") == ["node0", "node1", "node2"]
    assert calls.read_text().split()[1:] == ["show", "hostnames", "node[0-2]"]
    for empty in ("", "(null)", "None"):
        assert slurm.hostnames(empty) == []
    assert len(calls.read_text().splitlines()) == 1  # those are not asked
    _fake(tmp_path, monkeypatch, scontrol="echo node0; exit 1")
    assert slurm.hostnames("node[0-2]") == []
