"""Unit tests for plugins/module_utils/_on_node/launch_plan.py: run ids, the plan a restart renders
from the run's own request, and the renderer's files kept pure."""

from __future__ import annotations

import ast
from datetime import datetime
from pathlib import Path

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import (
    launch_plan as lp, launch_request, launchers, plan_checks, renderer)
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import Node, PlanError, new_run_id
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.renderer import render
from plan_helpers import plan_of


@pytest.mark.parametrize("module", [lp, plan_checks, renderer, launch_request, launchers])
def test_the_renderers_files_are_pure_standard_library(module):
    """No I/O, no subprocess, no environment reads, no ansible: only these imports, and each other
    relatively (so they run in the head package too)."""
    tree = ast.parse(Path(module.__file__).read_text())
    imported = set()
    for item in ast.walk(tree):
        if isinstance(item, ast.Import):
            imported.update(alias.name for alias in item.names)
        elif isinstance(item, ast.ImportFrom):
            imported.add("." * item.level + (item.module or ""))
    assert imported <= {"__future__", "collections.abc", "dataclasses", "ipaddress", "re", "shlex",
                        "socket", "types", "typing", "datetime", "secrets", "posixpath", ".launch_plan", ".launch_request",
                        ".launchers", ".plan_checks"}
    names = {item.id for item in ast.walk(tree) if isinstance(item, ast.Name)}
    assert not names & {"open", "os", "subprocess", "print", "input", "eval", "exec"}


def test_new_run_id_shape_and_renderer_accepts_it():
    run_id = new_run_id(datetime(2026, 11, 21, 10, 15, 2), "ab12cd")
    assert run_id == "tf-20261121-101502-ab12cd"
    plan = plan_of(nodes=(Node("a", "10.0.0.1", 1),), head="a", script="t.py", run_id=run_id,
                   hostfile_path="/tmp/h")
    assert render(plan).env["TORCHFLEET_RUN_ID"] == run_id


@pytest.mark.parametrize("run_id", ["", "has space", "../etc", "a/b", "x" * 65])
def test_user_run_ids_follow_the_renderer_rule(run_id):
    # A run id names a directory: the renderer's rule keeps '/' and '..' paths out.
    with pytest.raises(PlanError, match="run_id"):
        render(plan_of(nodes=(Node("a", "10.0.0.1", 1),), head="a", script="t.py", run_id=run_id,
                       hostfile_path="/tmp/h"))


def test_an_attempt_renders_the_runs_own_request_as_the_launch_resolved_it(supervisor_plan):
    # What the supervisor renders for a restart: the request on every node of it, the environment
    # the launch resolved, and the ssh masters the launch opened.
    nodes = [{"name": "n0", "address": "10.0.0.1", "slots": 2, "interface": "eth0"},
             {"name": "n1", "address": "10.0.0.2", "slots": 2, "interface": "eth0"}]
    run = supervisor_plan(nodes=nodes, script_args=["--epochs", "3"], env_pass=["PATH", "NCCL_DEBUG"],
                          env_set={"A": "1"}, env_secrets={"WANDB_API_KEY": "s3cret"}, control_dir="/tmp/tf-ssh-x")
    plan = lp.plan_of_run(run)
    assert plan.nodes == tuple(Node(**node) for node in nodes) and plan.request.script_args == ["--epochs", "3"]
    assert (plan.env_pass, plan.env_secrets, dict(plan.env_set)) == (("PATH", "NCCL_DEBUG"), ("WANDB_API_KEY",), {"A": "1"})
    assert plan.ssh_control_path == "/tmp/tf-ssh-x/%C" and not plan.tee_workers
    assert render(plan).argv[:3] == ["mpirun", "-np", "2"]
