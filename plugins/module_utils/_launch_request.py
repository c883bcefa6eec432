# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The launch request resolved: playbook variables into a typed request (``from_variables``),
and a request with setup's facts into the renderer's ``Plan`` (``resolve``). The launch role
(through its filters), the module, ``torchfleet render`` and ``torchfleet launch`` all call these,
so an option is interpreted in one place (the table: _launch_options.py; the checks:
_launch_checks.py).

Standard library only: the CLI imports this file outside Ansible.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_checks import by_pals
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_options import OPTIONS, Option, with_defaults
from ansible_collections.torchfleet.cluster.plugins.module_utils._head.launch_plan import Node, Plan, node_slots, run_log_dirs


def head_reaches_nodes(request: Mapping) -> bool:
    """Whether mpirun itself starts every node's daemon over ssh from the head (not mpich mode,
    tree spawn, Slurm, or the head alone), after the head's checks reached each node the same way."""
    req = with_defaults(request)
    return (req["check_nodes"] and not req["tree_spawn"] and req["mode"] != "mpich"
            and req["scheduler"] != "slurm" and len(req["nodes"] or ()) > 1)


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
        return str(value).lower() in ("true", "yes", "1", "on")
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
    """The request that playbook variables make (what -e gives, over the inventory's): each
    option by its role variable (launch_master_port) or its short name (master_port), the role
    variable first, as launch.yml takes them; typed as the table says. Options not given are
    left out (resolve() fills in the table's defaults)."""
    request = {}
    for option in OPTIONS:
        for key in (option.role_name, option.short):
            if key and key in variables:
                request[option.name] = _typed(option, key, variables[key])
                break
    return request


def resolve(request: Mapping, nodes, *, run_id: str, run_dir: str, env_pass=(), env_secrets=(),
            env_set=None, control_path: str | None = None, supervised: bool = False) -> Plan:
    """The renderer's plan for `request` (module option names; left out: the table's defaults) on
    `nodes` (Node, or the module's node dicts). The environment comes resolved by the caller, who
    alone sees it: names to pass (`env_pass`), secret names, and values to set. `supervised`: the
    launch module's run, whose follower reads the workers' files where it can; a command
    rendered for a person to run keeps torchrun's --tee (the output on the terminal)."""
    req = with_defaults(request)
    ranks, workers = run_log_dirs(run_dir, req["mode"])
    return Plan(
        nodes=tuple(node if isinstance(node, Node) else Node(**node) for node in nodes),
        head=req["head"], script=req["script"], run_id=run_id,
        hostfile_path=f"{run_dir}/hostfile", script_args=tuple(req["script_args"]),
        mode=req["mode"], port=req["master_port"], nproc_per_node=req["nproc_per_node"],
        python=req["python"], torchrun=req["torchrun"], launcher=req["launcher"],
        log_dir=ranks, node_log_dir=workers, network=req["network"],
        env_pass=tuple(env_pass), env_secrets=tuple(env_secrets),
        env_set=dict(req["env_set"] if env_set is None else env_set),
        mpirun_extra_args=tuple(req["mpirun_extra_args"]),
        allow_run_as_root=req["allow_run_as_root"], tree_spawn=req["tree_spawn"],
        ssh_control_path=control_path, silent_node_timeout=req["silent_node_timeout"],
        mpich_launcher=req["mpich_launcher"], tee_workers=not (supervised and reads_worker_files(req)),
    )


def reads_worker_files(request: Mapping) -> bool:
    """Whether the head reads the ranks' output from torchrun's files on each node (over the
    cluster's ssh; under Slurm too, where the head checks the nodes over ssh: a batch job's
    output would be torchrun's --tee copies, which lose and glue lines); otherwise torchrun
    copies it to the launcher's output (--tee): PALS nodes take no ssh."""
    return request["mode"] != "rank" and not by_pals(request) and (
        request["scheduler"] == "none" or (request["scheduler"] == "slurm" and request["check_nodes"]))
