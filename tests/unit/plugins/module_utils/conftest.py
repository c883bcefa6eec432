"""A supervisor's plan (run.json) for the tests of the launch module's side and of the head's."""

from dataclasses import fields

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.record import SupervisorPlan
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_resolution import LaunchRequest, stored

PLAN_FIELDS = {item.name for item in fields(SupervisorPlan)}


@pytest.fixture
def supervisor_plan():
    """SupervisorPlan of a run of one node, two ranks, with `changes`: the plan's own fields, or
    the request's options by their module names (nodes: the request's and the first attempt's)."""
    def plan(**changes):
        nodes = changes.get("nodes") or [{"name": "n0", "address": "10.0.0.1", "slots": 2, "interface": "eth0"}]
        request = {"head": nodes[0]["name"], "nodes": nodes, "script": "/r/train.py", "python": "python3",
                   "check_nodes": True, "stop_grace": 10, "launch_timeout": 0}
        values = {"run_id": "r1", "argv": ["mpirun"], "cwd": None, "command": "mpirun", "nodes": nodes,
                  "nproc": 2, "world_size": 2, "ssh": "ssh", "control_dir": None,
                  "paths": {"run": "/r/r1", "launcher": "/r/r1/launcher.log", "ranks": "", "workers": "/r/r1/workers"}}
        for key, value in changes.items():
            (values if key in PLAN_FIELDS else request)[key] = value
        return SupervisorPlan(request=stored(LaunchRequest.of(request)), **values)
    return plan
