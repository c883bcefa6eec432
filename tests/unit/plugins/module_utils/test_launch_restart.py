"""_launch_restart.py: which runs a restart by hand takes, and why it refuses the others (pure
logic)."""

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_restart import restart_refusal


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
