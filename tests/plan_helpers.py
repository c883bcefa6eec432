"""Launch plans for the tests of the renderer and its checks."""

from __future__ import annotations

from dataclasses import fields as dataclass_fields

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import SHELL, Node, Plan
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_request import LaunchRequest

HOSTFILE = "/home/train/.torchfleet/runs/run-1/hostfile"


def node(i: int, slots: int = 2, interface: str | None = "eth0") -> Node:
    return Node(f"node{i}", f"172.18.0.{i + 1}", slots, interface)


PLAN_FIELDS = {item.name for item in dataclass_fields(Plan)}


def plan_of(**given) -> Plan:
    """A Plan of `given`: the plan's own fields, and the request's options (port: master_port)."""
    request = {("master_port" if key == "port" else key): value for key, value in given.items() if key not in PLAN_FIELDS}
    return Plan(request=LaunchRequest.of(request), **{key: value for key, value in given.items() if key in PLAN_FIELDS})


def make_plan(**overrides) -> Plan:
    fields = dict(nodes=(node(1), node(2), node(3)), head="node1", script="/opt/tf/train.py",
                  run_id="run-1", hostfile_path=HOSTFILE)
    if overrides.get("mode") == "mpich":  # the PALS flavour unless a test names one
        fields["mpich_launcher"] = "pals"
    fields.update(overrides)
    return plan_of(**fields)


def shell_tail(argv: list[str]) -> list[str]:
    """The `/bin/sh -c SCRIPT torchfleet ARGS...` part: what each rank runs on its node."""
    for i in range(len(argv) - 1):
        if argv[i] == SHELL and argv[i + 1] == "-c":
            return argv[i:]
    raise AssertionError(f"no sh -c in {argv}")
