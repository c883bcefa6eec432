"""A supervisor's plan (run.json) for the tests of the launch module's side and of the head's."""

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._head.record import SupervisorPlan


@pytest.fixture
def supervisor_plan():
    """SupervisorPlan of a run of one node, two ranks, with `changes`."""
    def plan(**changes):
        values = {"run_id": "r1", "argv": ["mpirun"], "cwd": None, "command": "mpirun", "head": "n0",
                  "nodes": [{"name": "n0", "address": "10.0.0.1", "slots": 2, "interface": "eth0"}],
                  "mode": "torchrun", "nproc": 2, "world_size": 2, "python": "python3", "ssh": "ssh",
                  "check_nodes": True, "control_dir": None, "launch_timeout": 0, "stop_grace": 10,
                  "paths": {"run": "/r/r1", "launcher": "/r/r1/launcher.log", "ranks": "", "workers": "/r/r1/workers"},
                  "launch_plan": {"nodes": []}}
        values.update(changes)
        return SupervisorPlan(**values)
    return plan
