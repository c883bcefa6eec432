"""_launch_restart.py: which runs a restart by hand takes, and why it refuses the others (pure
logic), and its wait for what is left of the run (real processes)."""

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_restart import restart_refusal, wait_for_clean_up


@pytest.mark.parametrize("record, plan, said", [
    (None, None, "no run r1 in /r on this node"),
    ({"state": "running"}, {}, "run r1 is running (its supervisor, pid None, holds it): stop it first"),
    ({"state": "succeeded"}, {}, "run r1 succeeded: there is nothing to restart"),
    ({"state": "failed"}, {"scheduler": "slurm"}, "it ran through Slurm"),
    ({"state": "lost"}, {"mode": "mpich"}, "it ran through MPICH's mpiexec"),
    ({"state": "failed"}, "/r/r1/run.json keeps no launch request", "it was launched by an older torchfleet (/r/r1"),
    ({"state": "lost"}, {}, None),
    ({"state": "stopped"}, {}, None),
])
def test_which_runs_a_restart_by_hand_takes(record, plan, said, supervisor_plan):
    plan = plan if plan is None or isinstance(plan, str) else supervisor_plan(**plan)
    found = restart_refusal(record, plan, "r1", "/r/r1")
    assert (found is None) if said is None else (said in found), found


def test_a_restart_waits_for_what_is_left_of_the_run_to_end():
    # A dead supervisor's guardian still ending the run (a process with its run id), then gone.
    sweeping = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"],
                                env={**os.environ, "TORCHFLEET_RUN_ID": "tf-restart-wait",
                                     "TORCHFLEET_SUPERVISOR": "tf-restart-wait"})
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],  # a rank: not waited for
                                env={**os.environ, "TORCHFLEET_RUN_ID": "tf-restart-wait"})
    try:
        time.sleep(0.3)
        began = time.monotonic()
        assert wait_for_clean_up("tf-restart-wait", 30) == []
        assert time.monotonic() - began >= 0.5  # it waited for it, not refused at once
    finally:
        for proc in (sweeping, leftover):
            proc.kill()
            proc.wait()
    lasting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               env={**os.environ, "TORCHFLEET_RUN_ID": "tf-restart-left",
                                    "TORCHFLEET_SUPERVISOR": "tf-restart-left"})
    try:
        time.sleep(0.3)
        assert [proc["pid"] for proc in wait_for_clean_up("tf-restart-left", 0.5)] == [lasting.pid]
    finally:
        lasting.kill()
        lasting.wait()
