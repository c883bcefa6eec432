# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Restarting a run by hand (torchrun_launch, state=restarted): a run that failed or was lost
(its head rebooted, its supervisor killed) started again from its own request, as its next
attempt: the same directory, record and run id, a new rendezvous port, the attempts before it
kept. The supervisor does the rest as after a failure: the nodes that answer, fenced."""

from __future__ import annotations

from typing import cast

import dataclasses
import os
import time

from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_lock
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.ssh_to_nodes import probe_nodes
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.record import (
    ACTIVE,
    PLAN_FILE,
    OlderPlan,
    RESULT,
    SupervisorPlan,
    read_state,
    run_dir_of,
    runs_index,
)
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.report import STOP_HINT, group_runs, runs_listed
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launchers import launcher_of
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.node_files import write_file
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.processes import find_run_processes
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import Node, plan_of_run
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.renderer import render
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_start import (
    follow_run,
    install_head_package,
    launcher_env,
    start_supervisor,
)

# What a run restarted by hand may have ended as.
RESTARTABLE = ("failed", "lost", "timed_out", "stopped", "hung")


def restart_refusal(record: dict | None, plan: SupervisorPlan | str | None, run_id: str, run_dir: str) -> str | None:
    """Why the run in `run_dir` cannot be restarted, naming the fix; None when it can. `plan`: the
    run's plan, or why it could not be read."""
    if record is None or plan is None:
        return (f"no run {run_id} in {os.path.dirname(run_dir)} on this node: give the id of a run "
                f"of this cluster (torchfleet runs lists them) and the log_dir it ran with")
    state = record.get("state")
    if state in ACTIVE:
        return (f"run {run_id} is {state} (its supervisor, pid {record.get('supervisor_pid')}, holds it): "
                f"stop it first ({STOP_HINT}), or wait for it")
    if state not in RESTARTABLE:
        return f"run {run_id} {state}: there is nothing to restart; launch a new run instead"
    if isinstance(plan, str) or plan.request.scheduler != "none" or not launcher_of(plan.request).restarts:
        how = (f"it was launched by an older torchfleet ({plan})" if isinstance(plan, str) else
               "it ran through Slurm" if plan.request.scheduler != "none" else
               f"it ran through {launcher_of(plan.request).name}")
        return (f"run {run_id} cannot be restarted by torchfleet: {how}; launch it again (with your "
                f"script's resume option)")
    return None


def restarted_plan(module, plan: SupervisorPlan, record: dict) -> SupervisorPlan:
    """The run's plan for its next attempt: the attempts it had, and what the call overrides."""
    p = module.params
    attempts = record.get("attempts") or [{}]
    nodes = len(plan.request.nodes or ())
    min_nodes = p["min_nodes"] or plan.fewest_nodes
    if min_nodes > nodes:
        module.fail_json(msg=f"min_nodes is {min_nodes}, above run {plan.run_id}'s {nodes} nodes: give at "
                             f"most {nodes}, or 0 for the run's own ({plan.fewest_nodes})")
    # The ssh masters of the run's launch are long closed: every ssh connects by itself.
    # The run's request as this version takes it (an option added since at its default).
    request = plan.request.with_changes(max_restarts=p["max_restarts"] or plan.request.max_restarts)
    return dataclasses.replace(plan, request=request, attempts_before=len(attempts), fewest_nodes=min_nodes,
                               node_dirs=True, control_dir=None)


def other_runs(module, plan: SupervisorPlan) -> list[dict]:
    """The runs of torchfleet other than this one alive on the run's nodes that answer now
    ([{node, run_id, pids}]): a restart onto them would put two trainings on one set of devices."""
    nodes = [Node.of(node) for node in plan.request.nodes or ()]
    if not plan.request.check_nodes:
        nodes = [node for node in nodes if node.name == plan.head]
    ssh = module.get_bin_path("ssh", required=len(nodes) > 1)
    answers = probe_nodes(nodes, plan.head, ssh, plan.request.python, {node.name: {"expect": {}} for node in nodes},
                          timeout=15, connect_timeout=3)
    return [{"node": node.name, **run} for node in nodes for run in group_runs(answers[node.name].get("runs", []))
            if run["run_id"] != plan.run_id]


def wait_for_clean_up(run_id: str, seconds: float) -> list[dict]:
    """A dead supervisor's guardian still ending the run on the head (the process that carries
    the supervisor's mark), waited for up to `seconds`; what of it is still alive then. A restart
    that began beside it would be ended by it (its sweep ends every process of the run id). The
    run's other leftovers are the new supervisor's to end (its fence), as after any failure."""
    deadline = time.monotonic() + seconds
    while True:
        left = [proc for proc in find_run_processes({run_id}) if proc["supervisor"]]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.5)


def run_restarted(module) -> None:
    p = module.params
    run_id = p["run_id"]
    log_dir = os.path.expanduser(p["log_dir"])
    run_dir = run_dir_of(log_dir, run_id, runs_index())
    result = {"changed": False, "run_id": run_id, "log_dir": run_dir, "state_file": os.path.join(run_dir, "state.json")}
    if not module.check_mode:
        # Taken before the record is read, and held until the new supervisor has taken the run:
        # a second restart (or a launch) meanwhile is refused here, or finds the run active.
        try:
            module.launch_lock = _launch_lock.hold(run_id)
        except _launch_lock.LaunchLocked as held:
            module.fail_json(msg=f"refusing to restart: another launch or restart is starting on this cluster "
                                 f"({held}); restart once it has ended", **result)
        except OSError as err:
            module.fail_json(msg=f"cannot take the launch lock {_launch_lock.lock_path()} on the head: {err}",
                             **result)
    record = read_state(run_dir)
    plan: SupervisorPlan | str | None
    try:
        plan = SupervisorPlan.read(run_dir)
    except OlderPlan as err:
        plan = str(err)
    except (OSError, ValueError, TypeError):
        plan = None
    refusal = restart_refusal(record, plan, run_id, run_dir)
    if refusal:
        module.fail_json(msg=f"refusing to restart: {refusal}", **result)
    plan = restarted_plan(module, cast(SupervisorPlan, plan), cast(dict, record))  # else refused above
    # The environment the run had, but for values never written down: its secrets, given again.
    rendered = render(plan_of_run(plan))
    missing = [name for name in rendered.secrets if name not in p["env_secrets"]]
    if missing:
        module.fail_json(msg=f"run {run_id} passed the secrets {', '.join(missing)} to its ranks, and they are "
                             f"never stored: give them again (env_secrets; launch_env_secrets with the "
                             f"variables set on the controller)", **result)
    env = launcher_env(os.environ, set(rendered.inherit), rendered.env,
                       {name: str(p["env_secrets"][name]) for name in rendered.secrets})
    result.update(launcher_log=plan.paths["launcher"], attempt=plan.attempts_before)
    # As long as a guardian's clean-up may take: the launcher's grace, the head's, the nodes'.
    left = [] if module.check_mode else wait_for_clean_up(run_id, 3 * plan.request.stop_grace + 40)
    if left:
        pids = ", ".join(str(proc["pid"]) for proc in left)
        module.fail_json(msg=f"refusing to restart run {run_id}: its guardian (pid {pids} on {plan.head}) is still "
                             f"ending what was left of it. Restart once it has ended, or end it first with "
                             f"{STOP_HINT}", **result)
    others = other_runs(module, plan)
    if others:
        module.fail_json(msg=f"refusing to restart run {run_id}: another torchfleet run is alive {runs_listed(others)}. "
                             f"Stop it first with {STOP_HINT}, or wait for it, then restart", runs=others, **result)
    if module.check_mode:
        module.exit_json(**result)
    try:
        # The plan with the attempt; the record is the new supervisor's once it begins it.
        package = install_head_package()
        plan = dataclasses.replace(plan, package=package)
        write_file(os.path.join(run_dir, PLAN_FILE), plan.to_json().encode())
    except OSError as err:
        module.fail_json(msg=f"cannot prepare run {run_id}'s restart in {run_dir}: {err}", **result)
    result["changed"] = True
    module.supervised = True
    supervisor_proc = start_supervisor(module, run_dir, package, env, result, restarted=True)
    followed = follow_run(module, plan_of_run(plan), run_dir, supervisor_proc, None)
    shown = {key: getattr(followed, key) for key in followed.keys(RESULT)}
    result.update({key: value for key, value in shown.items() if value is not None},
                  nodes=followed.nodes, world_size=followed.world_size)
    if followed.state in ACTIVE:
        module.exit_json(**result)
    msg = result.pop("msg")
    if followed.state != "succeeded":
        module.fail_json(msg=msg, **result)
    module.exit_json(**result)
