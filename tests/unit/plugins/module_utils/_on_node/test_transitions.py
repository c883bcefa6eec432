"""transitions.py: one owner of a run's record, every change a named transition."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import transitions
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.record import RunRecord, read_state
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.transitions import (
    TRANSITIONS,
    Owner,
    RecordKeeper,
    RecordRefused,
)


def _keeper(run_dir, owner=None):
    return RecordKeeper(str(run_dir), RunRecord(run_id="r1", log_dir=str(run_dir)), owner or Owner.this_process())


def _a_dead_owner():
    """An owner that was a real process, gone now."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    owner = Owner(proc.pid, transitions.process_start(proc.pid), transitions.boot_id())
    proc.kill()
    proc.wait()
    return owner


def test_a_run_goes_through_its_states_by_named_transitions(tmp_path):
    keeper = _keeper(tmp_path)
    assert keeper.begin().state == "starting"
    assert keeper.launched(launcher_pid=42).state == "running"
    assert keeper.update(msg="on").state == "running"
    assert keeper.restarting(msg="attempt 0 ended").state == "restarting"
    assert keeper.launched(launcher_pid=43).state == "running"
    assert keeper.end("succeeded", rc=0).state == "succeeded"
    on_disk = json.loads((tmp_path / "state.json").read_text())
    assert (on_disk["state"], on_disk["launcher_pid"], on_disk["supervisor_pid"]) == ("succeeded", 43, os.getpid())
    with pytest.raises(RecordRefused, match="not from a run that is succeeded"):
        keeper.update(msg="after the end")  # nothing is written after the last record
    assert json.loads((tmp_path / "state.json").read_text())["msg"] == "attempt 0 ended"


def test_only_the_owner_writes_and_a_run_held_by_a_live_supervisor_is_not_begun_again(tmp_path):
    mine = _keeper(tmp_path)
    mine.begin()
    other = _keeper(tmp_path, Owner(os.getppid(), transitions.process_start(os.getppid()), transitions.boot_id()))
    with pytest.raises(RecordRefused, match="not from a run that is starting"):
        other.begin()  # its supervisor (this process) is alive
    with pytest.raises(RecordRefused, match="held by supervisor"):
        other.update(msg="not mine")
    assert read_state(str(tmp_path))["supervisor_pid"] == os.getpid()


def test_a_run_whose_supervisor_died_is_begun_again_by_a_restart(tmp_path):
    gone = _a_dead_owner()
    transitions.write_state(str(tmp_path), RunRecord(run_id="r1", state="running", **gone.fields()).to_dict())
    assert read_state(str(tmp_path))["state"] == "lost"
    restarted = _keeper(tmp_path)
    assert restarted.begin("restarting").state == "restarting"


def test_the_guardian_acts_only_for_its_own_supervisor(tmp_path):
    gone = _a_dead_owner()
    transitions.write_state(str(tmp_path), RunRecord(run_id="r1", state="running", **gone.fields()).to_dict())
    restarted = _keeper(tmp_path)
    restarted.begin("restarting")  # a restart took the run before the old guardian woke
    cleaned = []
    assert not transitions.abandon(str(tmp_path), gone, lambda: cleaned.append(1) or {})
    assert cleaned == [] and read_state(str(tmp_path))["state"] == "restarting"
    # Its own supervisor's run, left active: ended and recorded lost.
    mine = _a_dead_owner()
    transitions.write_state(str(tmp_path), RunRecord(run_id="r1", state="running", **mine.fields()).to_dict())
    assert transitions.abandon(str(tmp_path), mine, lambda: {"msg": "ended by its guardian"})
    assert (read_state(str(tmp_path))["state"], read_state(str(tmp_path))["msg"]) == ("lost", "ended by its guardian")


def test_every_state_a_transition_names_is_a_run_state():
    states = {state.value for state in transitions.RunState} | {None}
    for sources, targets in TRANSITIONS.values():
        assert set(sources) <= states and set(targets) <= states


def test_the_injected_fault_fails_the_first_write_after_the_launcher_started(tmp_path, monkeypatch):
    monkeypatch.setenv(transitions.FAULT_VAR, transitions.FAULT_SAVE)
    keeper = _keeper(tmp_path)
    keeper.begin()
    keeper.launched(launcher_pid=1)
    with pytest.raises(OSError, match="failed on purpose"):
        keeper.update(msg="x")
    assert keeper.end("failed", rc=1).state == "failed"  # once only


def test_a_full_disk_under_the_record_and_its_log_skips_the_write_and_raises_nothing(tmp_path, monkeypatch):
    # The run directory's file system full: the record's write fails, and so does the line that
    # says so in supervisor.log (the supervisor's stderr, on the same disk).
    keeper = _keeper(tmp_path)
    keeper.begin()
    keeper.launched()

    def full(*_args, **_kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(transitions, "write_state", full)
    # Line-buffered, as Python keeps a stderr that is a file: each line is written at once.
    disk_full = open("/dev/full", "w", buffering=1, encoding="utf-8")  # every write: ENOSPC
    monkeypatch.setattr(sys, "stderr", disk_full)
    try:
        record = keeper.update(progress={"0": "step 7"})
    finally:
        monkeypatch.undo()
        try:
            disk_full.close()  # what it kept of the line fails once more
        except OSError:
            pass
    assert record.progress == {"0": "step 7"}  # kept, for the next write that has room
    assert read_state(str(tmp_path))["state"] == "running"
