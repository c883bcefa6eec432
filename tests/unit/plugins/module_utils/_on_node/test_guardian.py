"""guardian.py: a guardian ends its own supervisor's run, and never a run a restart has taken."""

import os
import subprocess
import sys
import time

from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_start
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import processes, transitions
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.record import (
    PLAN_FILE,
    RunRecord,
    read_state,
)


def _run(supervisor_plan, tmp_path, run_id):
    run_dir = tmp_path / run_id
    run_dir.mkdir()
    paths = {"run": str(run_dir), "launcher": str(run_dir / "launcher.log"), "ranks": "", "workers": ""}
    plan = supervisor_plan(
        run_id=run_id, argv=["true"], cwd=None, command="true", nodes=[{"name": "here", "address": "127.0.0.1", "slots": 1}],
        mode="rank", nproc=1, world_size=1, python=sys.executable, ssh=None, check_nodes=False,
        control_dir=None, launch_timeout=0, stop_grace=1, paths=paths)
    (run_dir / PLAN_FILE).write_text(plan.to_json())
    (run_dir / "supervisor.log").write_text("")
    # A rank of the run, in a session of its own as torchrun's workers are.
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                            env=dict(os.environ, **{processes.RUN_ID_VAR: run_id}))
    return run_dir, rank


def _guardian(tmp_path, run_dir, owner):
    """A guardian as the supervisor `owner` starts it, from the installed head package; the write
    end of its pipe (closing it is the supervisor's end)."""
    package = _launch_start.install_head_package(str(tmp_path / "home"))
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([sys.executable, "-S", "-m", "_on_node.guardian", str(run_dir), str(owner.pid),
                             str(owner.start), owner.boot], stdin=read_end, cwd=os.path.dirname(package))
    os.close(read_end)
    return proc, write_end


def _old_owner():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    owner = transitions.Owner(proc.pid, transitions.process_start(proc.pid), transitions.boot_id())
    proc.kill()
    proc.wait()
    return owner


def test_an_old_supervisors_guardian_leaves_a_run_that_a_restart_has_taken_alone(tmp_path, supervisor_plan):
    # The old supervisor ended its run (failed), and a restart by hand began it again (this
    # process stands in for the new supervisor) before the old one's process was gone.
    run_dir, rank = _run(supervisor_plan, tmp_path, "tf-unit-taken")
    old = _old_owner()
    guardian, pipe = _guardian(tmp_path, run_dir, old)
    try:
        new = transitions.RecordKeeper(str(run_dir), RunRecord(run_id="tf-unit-taken"), transitions.Owner.this_process())
        transitions.write_state(str(run_dir), RunRecord(run_id="tf-unit-taken", state="failed", **old.fields()).to_dict())
        new.begin("restarting")
        new.launched(launcher_pid=rank.pid)
        os.close(pipe)  # the old supervisor's process is gone at last
        assert guardian.wait(timeout=30) == 0
        assert rank.poll() is None  # the restarted run's rank is untouched
        record = read_state(str(run_dir))
        assert (record["state"], record["supervisor_pid"]) == ("running", os.getpid()), record
    finally:
        rank.kill()
        rank.wait()


def test_a_guardian_ends_its_own_supervisors_run_and_records_it_lost(tmp_path, supervisor_plan):
    run_dir, rank = _run(supervisor_plan, tmp_path, "tf-unit-own")
    old = _old_owner()
    transitions.write_state(str(run_dir), RunRecord(run_id="tf-unit-own", state="running", **old.fields()).to_dict())
    guardian, pipe = _guardian(tmp_path, run_dir, old)
    try:
        os.close(pipe)
        assert guardian.wait(timeout=30) == 0
        deadline = time.monotonic() + 10
        while rank.poll() is None:
            assert time.monotonic() < deadline, "the rank outlived its run's guardian"
            time.sleep(0.1)
        record = read_state(str(run_dir))
        assert record["state"] == "lost" and "its guardian ended the run (1 process(es) on the head)" in record["msg"]
    finally:
        rank.kill()
        rank.wait()
