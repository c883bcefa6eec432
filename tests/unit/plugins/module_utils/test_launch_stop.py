"""_launch_stop.py: stopping runs on the head (torchrun_launch, state=stopped). The processes,
the run board and Slurm are stand-ins here: what is tested is the order of the stop, what it
reports, and when it fails."""

import signal
from types import SimpleNamespace

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_stop as stop


class Done(Exception):
    """exit_json or fail_json was called: the module's result."""

    def __init__(self, failed, result):
        super().__init__(result.get("msg", ""))
        self.failed, self.result = failed, result


class _Module:
    def __init__(self, check_mode=False, **params):
        self.check_mode = check_mode
        self.params = {"run_id": None, "stop_grace": 5, **params}

    def exit_json(self, **result):
        raise Done(False, result)

    def fail_json(self, **result):
        raise Done(True, result)


def proc(pid, run_id, supervisor=False):
    return {"pid": pid, "run_id": run_id, "cmdline": f"cmd {pid}", "pgid": pid, "supervisor": supervisor}


class Clock:
    """time.monotonic and time.sleep of the module: sleeping moves the clock."""

    def __init__(self):
        self.now, self.slept = 1000.0, 0.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
        self.slept += seconds


@pytest.fixture
def kills(monkeypatch):
    sent = []

    def kill(pid, signum):
        sent.append((pid, signum))
        if pid == 666:
            raise ProcessLookupError(pid)
    monkeypatch.setattr(stop, "os", SimpleNamespace(kill=kill))
    clock = Clock()
    monkeypatch.setattr(stop, "time", clock)
    return SimpleNamespace(sent=sent, clock=clock)


def test_only_supervisors_are_asked_and_the_stop_waits_until_they_are_gone(kills, monkeypatch):
    alive = {10: 3, 20: 1, 666: 0}  # pid: questions until it is gone (666 was gone already)
    asked = []

    def process_start(pid):
        asked.append(pid)
        alive[pid] -= 1
        return None if alive[pid] < 0 else 12345
    monkeypatch.setattr(stop, "process_start", process_start)
    stop.stop_supervisors([proc(10, "a", True), proc(11, "a"), proc(20, "b", True), proc(666, "c", True)], grace=5)
    assert kills.sent == [(10, signal.SIGTERM), (20, signal.SIGTERM), (666, signal.SIGTERM)]
    assert 11 not in asked and 0 < kills.clock.slept < 5


def test_supervisors_that_stay_are_waited_for_three_graces_and_40_seconds(kills, monkeypatch):
    monkeypatch.setattr(stop, "process_start", lambda pid: 1)
    stop.stop_supervisors([proc(10, "a", True)], grace=10)
    assert 70 <= kills.clock.slept < 70.5


def test_no_supervisor_means_no_signal_and_no_wait(kills, monkeypatch):
    monkeypatch.setattr(stop, "process_start", lambda pid: 1)
    stop.stop_supervisors([proc(11, "a")], grace=10)
    assert kills.sent == [] and kills.clock.slept == 0


@pytest.fixture
def head(monkeypatch):
    """The head as run_stopped finds it: `procs` alive, Slurm's `jobs`, the board's `others`;
    what it asked and did is logged in `calls`."""
    state = SimpleNamespace(procs=[], left=[], jobs=[], others=[], survivors=[], cancel_fails=set(), calls=[],
                            queue=[{"job_id": "9", "user": "ann"}])

    def find(run_ids):
        state.calls.append(("find", run_ids))
        return state.left if any(c[0] == "supervisors" for c in state.calls) else state.procs

    def run_jobs(run_ids):
        state.calls.append(("jobs", run_ids))
        return state.jobs

    def cancel(job_id):
        state.calls.append(("cancel", job_id))
        if job_id in state.cancel_fails:
            raise stop.slurm.SlurmError(f"scancel {job_id} failed")

    monkeypatch.setattr(stop._launch_lock, "wait_free", lambda seconds: state.calls.append(("lock", seconds)))
    monkeypatch.setattr(stop, "find_run_processes", find)
    monkeypatch.setattr(stop.slurm, "run_jobs", run_jobs)
    monkeypatch.setattr(stop.slurm, "cancel", cancel)
    monkeypatch.setattr(stop.slurm, "queue", lambda: state.queue)
    monkeypatch.setattr(stop, "others_alive", lambda: state.others)
    monkeypatch.setattr(stop, "stop_supervisors", lambda procs, grace: state.calls.append(("supervisors", grace)))
    monkeypatch.setattr(stop, "stop_processes",
                        lambda procs, grace: state.calls.append(("sweep", [p["pid"] for p in procs], grace))
                        or state.survivors)
    return state


def stopped(module):
    with pytest.raises(Done) as done:
        stop.run_stopped(module)
    return done.value


def test_nothing_to_stop_changes_nothing(head):
    done = stopped(_Module())
    assert not done.failed and done.result["changed"] is False
    assert done.result["runs"] == [] and done.result["jobs"] == [] and done.result["queue"] == []
    assert head.calls == [("lock", stop.START_IN_FLIGHT_WAIT), ("find", None), ("jobs", None)]


def test_a_check_shows_what_would_stop_and_the_queue_without_waiting_or_stopping(head):
    head.procs = [proc(10, "r1", True), proc(12, "r1"), proc(30, "r2")]
    head.others = [{"run_id": "x", "account": "ann", "state": "running", "started": "t", "world_size": 8,
                    "head": "n0", "pids": [1]}]
    done = stopped(_Module(check_mode=True, run_id="r1"))
    assert done.result["changed"] is True and not done.failed
    assert done.result["runs"] == [{"run_id": "r1", "pids": [10, 12]}, {"run_id": "r2", "pids": [30]}]
    assert done.result["stopped"][0] == {"pid": 10, "run_id": "r1", "cmdline": "cmd 10"}
    assert done.result["others"] == [{"run_id": "x", "account": "ann", "state": "running", "started": "t",
                                      "world_size": 8, "head": "n0"}]
    assert done.result["queue"] == head.queue
    assert head.calls == [("find", {"r1"}), ("jobs", {"r1"})]  # no lock waited for, nothing stopped


def test_supervisors_first_then_the_sweep_of_what_is_left(head):
    head.procs = [proc(10, "r1", True), proc(12, "r1")]
    head.left = [proc(12, "r1")]
    done = stopped(_Module(stop_grace=7))
    assert not done.failed and done.result["changed"] is True
    assert head.calls[3:] == [("supervisors", 7), ("find", {"r1"}), ("sweep", [12], 7)]


def test_nothing_left_after_the_supervisors_needs_no_sweep(head):
    head.procs = [proc(10, "r1", True)]
    done = stopped(_Module())
    assert not done.failed
    assert [call[0] for call in head.calls] == ["lock", "find", "jobs", "supervisors", "find"]


def test_survivors_of_sigkill_fail_the_stop_naming_them(head):
    head.procs = head.left = [proc(12, "r1")]
    head.survivors = [proc(12, "r1")]
    done = stopped(_Module())
    assert done.failed and done.result["survivors"] == [12]
    assert "processes survived SIGKILL: 12 (r1)" in done.result["msg"]
    assert done.result["runs"] == [{"run_id": "r1", "pids": [12]}]


def test_slurm_jobs_left_are_cancelled_and_a_failed_cancel_fails_the_stop(head):
    head.jobs = [{"job_id": "7", "run_id": "r1"}, {"job_id": "8", "run_id": "r2"}]
    done = stopped(_Module())
    assert not done.failed and done.result["changed"] is True and done.result["jobs"] == head.jobs
    assert [call for call in head.calls if call[0] in ("cancel", "jobs")] == [
        ("jobs", None), ("jobs", {"r1", "r2"}), ("cancel", "7"), ("cancel", "8")]
    head.calls.clear()
    head.cancel_fails = {"7"}
    done = stopped(_Module())
    assert done.failed and done.result["msg"] == "scancel 7 failed"
    assert ("cancel", "8") in head.calls  # the others are still cancelled
