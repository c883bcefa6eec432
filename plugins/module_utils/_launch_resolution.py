# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The launch request on the controller and in the module: ``LaunchRequest`` (_on_node/
launch_request.py, a typed field per module option of the table) made from playbook variables
(``from_variables``, then ``LaunchRequest.of``), and resolved with setup's facts into the
renderer's ``Plan`` (``_on_node/launch_plan.plan_for``). The run's supervisor gets the same
request, redacted, in run.json (``stored``). The checks: _launch_checks.py.

Standard library only: the CLI imports this file outside Ansible.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_option_schema import Option
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_options import OPTIONS
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import node_slots
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_request import LaunchRequest
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launchers import flavour, launcher_named, launcher_of

__all__ = ["LaunchRequest", "RequestError", "from_variables", "head_reaches_nodes", "launch_nodes", "resolved",
           "stored", "truthy"]


def stored(request: LaunchRequest) -> LaunchRequest:
    """The request as run.json keeps it for the run's supervisor, and as the supervisor reads it
    back (SupervisorPlan.request): no secret value and not the files' contents."""
    return request.redacted()


def head_reaches_nodes(request: LaunchRequest) -> bool:
    """Whether mpirun itself starts every node's daemon over ssh from the head (not mpich mode,
    tree spawn, Slurm, or the head alone), after the head's checks reached each node the same way."""
    return (request.check_nodes and not request.tree_spawn and launcher_of(request).rides_ssh_masters
            and request.scheduler != "slurm" and len(request.nodes or ()) > 1)


def launch_nodes(node_facts, nproc_per_node) -> list[dict]:
    """Each node's facts (setup's cache, in the group's order) as the module's node entry: name,
    cluster address and interface, and slots (nproc_per_node; with auto the GPU count, 1 on a
    node without GPUs)."""
    nodes = []
    for facts in node_facts:
        net = facts["preflight_net"]
        nodes.append({"name": facts["inventory_hostname"], "address": net["address"],
                      "interface": net["interface"],
                      "slots": node_slots(facts.get("preflight_gpu_count"), nproc_per_node)})
    return nodes


def resolved(head_facts: Mapping, mode: str, user: str, script: str, shared_storage, script_dir: str,
             mpich_launcher: str | None = None) -> dict:
    """The module's arguments that the launch takes from setup's facts of the head, given the
    options the user chose: the one resolution of them, which the launch role (filter
    launch_resolved, in run.yml) and `torchfleet render` both call. None where the facts lack a
    value (render without facts; the launch's checks refuse that before)."""
    chosen = flavour(mode, mpich_launcher, head_facts.get("mpich_found_launcher"))
    launcher = launcher_named(mode, chosen)
    on_nodes = script if truthy(shared_storage) else f"{script_dir.rstrip('/')}/{posixpath.basename(script)}"
    return {
        "script": on_nodes,
        "chdir": posixpath.dirname(on_nodes),
        "python": head_facts.get("python_env_python") or None,
        # Empty with python_env_engine=none, which only rank mode (no torchrun) accepts.
        "torchrun": head_facts.get("python_env_torchrun") or None,
        # The full path setup recorded: plain mpirun and mpiexec are alternatives either MPI may hold.
        "launcher": head_facts.get(launcher.setup_fact) or None,
        "mpich_launcher": chosen,
        # Open MPI refuses root without its flag; Hydra has none.
        "allow_run_as_root": user == "root" and launcher.run_as_root_flag,
        # PALS starts the nodes' processes itself; the head takes no ssh to them.
        "check_nodes": launcher.over_ssh,
        # What setup installed (the same on every node, or setup fails): a node that drifted since is refused.
        "expect_packages": dict(head_facts.get("python_env_installed") or {}),
    }


def truthy(value) -> bool:
    """A boolean variable as Ansible's `bool` filter reads it (-e gives text): true, yes, on, 1."""
    return str(value).strip().lower() in ("true", "yes", "on", "1", "y", "t")


class RequestError(ValueError):
    """A variable that cannot mean what its option takes; the message names it and its value."""


def _typed(option: Option, key: str, value):
    """`value` as option's type wants it, from a variable (-e gives strings)."""
    kind = option.role_type or option.type
    kind = option.type if kind == "raw" else kind
    if kind == "int":
        if option.name == "nproc_per_node" and str(value) == "auto":
            return "auto"
        try:
            return int(value)
        except (TypeError, ValueError):
            raise RequestError(f"{key} must be a number, got {value!r}") from None
    if kind == "bool":
        return truthy(value)
    if kind == "list":
        if value is None or value == "":
            return []
        if isinstance(value, str):  # -e env_pass=A,B
            return [item.strip() for item in value.split(",") if item.strip()]
        if isinstance(value, list):
            return [str(item) for item in value]
        raise RequestError(f"{key} must be a list, got {value!r}")
    if kind == "dict":
        if not value:
            return {}
        if not isinstance(value, Mapping):
            raise RequestError(f"{key} must be a mapping, got {value!r}")
        return dict(value)
    return None if value is None else str(value)


def from_variables(variables: Mapping) -> dict:
    """The options that playbook variables give (what -e gives, over the inventory's): each
    option by its role variable (launch_master_port) or its short name (master_port), the role
    variable first, as launch.yml takes them; typed as the table says. Options not given are
    left out (LaunchRequest.of fills in the table's defaults)."""
    request = {}
    for option in OPTIONS:
        for key in (option.role_name, option.short):
            if key and key in variables:
                request[option.name] = _typed(option, key, variables[key])
                break
    return request
