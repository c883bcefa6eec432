# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The launch request's checks, on the controller before anything on a node changes
(``problems``, through the launch role's launch_problems filter) and in the module
(``module_refusal``): each message names the variable, its value and the fix.

Standard library only: the CLI imports this file outside Ansible.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.slurm import (
    SlurmError, check_name, check_time_limit)
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_options import (
    LIST_OPTIONS, OPTIONS, RESTART_OPTIONS)
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import port_problem
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launchers import (
    choice_problem, flavour, launcher_named)
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.plan_checks import torchrun_args_problem
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_resolution import truthy
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.liveness import SILENT_AFTER

EXAMPLE_LISTS = {option.name: list(option.example) for option in OPTIONS if option.example}
# The script and its files travel base64 in the launch module's arguments, and on to each node
# that lacks them: right for code and configuration, not for data.
FILES_LIMIT_MIB = 16

# A shell character anywhere, or an option followed by a space (a value in the same item).
SHELL_LIKE = re.compile(r"[;|&$`<>()\n]|^-\S*\s")


def _is_list(value) -> bool:
    # A string is a sequence too: "WANDB_API_KEY" would become thirteen one-letter names.
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, Mapping))


def nproc_problem(value) -> str | None:
    nproc = str(value)
    if nproc != "auto" and not re.fullmatch(r"[1-9][0-9]*", nproc):
        return (f"nproc_per_node is '{nproc}': give auto (the GPU count) or a whole number of workers "
                f"per node, such as 2.")
    return None


def _nproc_problems(request: dict) -> list[str]:
    said = nproc_problem(request["nproc_per_node"])
    if said:
        return [said]
    # The launch applies one count to every node (the head's), and torchrun needs the same count
    # everywhere: a per-node nproc_per_node (a hostfile's slots) would be silently ignored.
    by_count: dict[str, list[str]] = {}
    for node in request["nodes"]:
        by_count.setdefault(str(node.get("nproc_per_node", "auto")), []).append(node["inventory_hostname"])
    if len(by_count) <= 1:
        return []
    counts = "; ".join(f"{count} on {', '.join(hosts)}" for count, hosts in by_count.items())
    return [f"nproc_per_node differs between nodes ({counts}), but a launch runs the same number of "
            f"workers on every node (torchrun needs that, and the launch applies one count to all): "
            f"make the counts equal in the inventory (slots in a hostfile), or give one for all with "
            f"-e nproc_per_node=N."]


def _size_problems(paths: list[str]) -> list[str]:
    sizes = {path: os.path.getsize(path) for path in paths}
    total = sum(sizes.values())
    if total <= FILES_LIMIT_MIB * 2**20:
        return []
    largest = ", ".join(f"{path} {size / 2**20:.1f} MiB"
                        for path, size in sorted(sizes.items(), key=lambda item: -item[1])[:3])
    return [f"The script and its files come to {total / 2**20:.1f} MiB ({largest}), over the "
            f"{FILES_LIMIT_MIB} MiB a launch carries to the nodes in its own arguments. Put data and "
            f"checkpoints where every node reads them (shared storage, or copied once by your own "
            f"task) and pass their path in script_args; or, when the script itself is on shared "
            f"storage, use -e shared_storage=true."]


def _shape_problem(request: dict) -> str | None:
    """No script, or a list variable that is not a list: the other checks need both, so this
    problem is said alone."""
    if not request["script"]:
        return "Name the training script: ansible-playbook launch.yml -e script=train.py"
    for key, value in request["lists"].items():
        if not _is_list(value):
            return (f"{key} must be a list, for example -e '{json.dumps({key: EXAMPLE_LISTS[key]})}', "
                    f"so each item arrives exactly as given; it is {json.dumps(value)}.")
    return None


def chosen_flavour(request: dict) -> str | None:
    """The MPICH flavour the request runs under: the one given, else the one setup found on the head."""
    return flavour(request["mode"], request.get("mpich_launcher"), request.get("head_found_launcher"))


def launcher(request: dict):
    """The launcher the request runs under (before choice_problem's check: Hydra for mpich)."""
    return launcher_named(request["mode"], chosen_flavour(request))


def _start_problems(request: dict) -> list[str]:
    lists = request["lists"]
    problems = []
    # False for `torchfleet render`: the script, files and secrets are the controller's at launch time.
    shared = request["shared_storage"] or request.get("controller") is False
    if not shared and not os.path.isfile(request["script"]):
        problems.append(f"The script {request['script']} is not a file on the controller. Give its path "
                        f"(relative to where you run ansible-playbook), or -e shared_storage=true when "
                        f"the nodes already see it at that path.")
    missing = [] if shared else [path for path in lists["files"] if not os.path.isfile(path)]
    if missing:
        problems.append(f"These files are not on the controller: {', '.join(missing)}.")
    elif not shared and launcher(request).over_ssh and os.path.isfile(request["script"]):
        problems += _size_problems([request["script"], *lists["files"]])
    problems += _nproc_problems(request)
    problems += [said for said in (port_problem(request["master_port"]),
                                   heartbeat_problem(request.get("heartbeat_timeout", 0)),
                                   hang_problem(request.get("hang_timeout", "auto"))) if said]
    said = torchrun_args_problem(lists.get("torchrun_extra_args") or [], request["mode"])
    if said:  # refused here, before any node, not first on the head
        problems.append(said + ".")
    if request.get("bind_to", "none") != "none" and not launcher(request).binds:
        problems.append(f"bind_to is {request['bind_to']}, but through Cray PALS torchfleet starts each node's "
                        f"torchrun with --cpu-bind none, and PALS's binding is not mpirun's: leave bind_to at none.")
    elif request.get("bind_to") == "core" and request["mode"] != "rank":
        problems.append(f"bind_to is core, but in {request['mode']} mode mpirun starts one torchrun per node and "
                        f"its workers inherit the binding: every worker of a node would share one core. Use "
                        f"bind_to=socket or numa, or launch_mode=rank (one process a worker), or leave bind_to "
                        f"at none.")
    if not re.match(r"[/~]", request["log_dir"]):
        problems.append(f"log_dir is '{request['log_dir']}': give an absolute path on the nodes, or one "
                        f"under the training account's home such as ~/torchfleet/runs (a relative path "
                        f"would depend on where each process starts).")
    # mpirun runs without a shell: a `;` is a plain character and "--mca x y" one word, so such an
    # item never means what it would mean typed in a shell.
    shell_like = "', '".join(arg for arg in lists["mpirun_extra_args"] if SHELL_LIKE.search(arg))
    if shell_like:
        problems.append(f"mpirun_extra_args holds '{shell_like}': no shell "
                        f"reads these arguments, so shell characters (; | & $ ` < > ( )) stay plain text "
                        f"and an option with its value in one item is one word. Give each option and each "
                        f"value as its own list item, for example "
                        f"-e '{json.dumps({'mpirun_extra_args': EXAMPLE_LISTS['mpirun_extra_args']})}'.")
    unset = [name for name in lists["env_secrets"] if not os.environ.get(name) and request.get("controller") is not False]
    if unset:
        problems.append(f"These secrets are not set in the controller's environment: {', '.join(unset)}. "
                        f"Export them before running ansible-playbook (their values are never printed).")
    return problems + _part_problems(request)


def excluded_names(value) -> list[str]:
    """The node names of `exclude`: a list, or names joined by ','."""
    if isinstance(value, str):
        value = value.split(",")
    return [str(name).strip() for name in value or () if str(name).strip()]


def run_nodes(request: dict) -> list[str]:
    """The run's nodes: the group's (`group_hosts`) that the play has (--limit) and `exclude`
    does not name, in the group's order."""
    left = set(excluded_names(request.get("exclude")))
    return [host for host in request["group_hosts"] if host in request["play_hosts"] and host not in left]


def _part_problems(request: dict) -> list[str]:
    """A run on part of the group (--limit, exclude): names the nodes it knows, keeps its head."""
    if not isinstance(request.get("exclude") or [], (str, list)):
        return [f"exclude is '{request['exclude']}': give node names, as a list or joined by ',' "
                f"(-e exclude=node2,node3)."]
    unknown = [name for name in excluded_names(request.get("exclude")) if name not in request["group_hosts"]]
    if unknown:
        return [f"exclude names {', '.join(unknown)}, not a node of group '{request['group']}' "
                f"({', '.join(request['group_hosts'])}): give the names the inventory lists."]
    chosen = run_nodes(request)
    if not chosen:
        return [f"--limit and exclude leave no node of group '{request['group']}' to run on: name at "
                f"least the head, {request['head']}."]
    if request["head"] not in chosen:
        return [f"The head {request['head']} is left out of this run (by --limit or exclude), but the head "
                f"runs the launcher and the run's supervisor and hosts the rendezvous: keep it in the run, "
                f"or make a node of the run the head with -e torchfleet_head=NODE (set in the inventory, "
                f"logs, runs and stop find the run there too)."]
    return []


def _scheduler_problems(request: dict) -> list[str]:
    """What Slurm would refuse, or cannot run, that the controller can tell alone (the head's
    sbatch and partitions are checked on the head by the launch module)."""
    scheduler = str(request.get("scheduler") or "none")
    slurm = request.get("slurm") or {}
    if scheduler not in ("none", "slurm"):
        return [f"scheduler is '{scheduler}': give none (mpirun over ssh) or slurm (an sbatch job)"
                + ("; no PBS server is driven by torchfleet: write a batch script with `torchfleet "
                   "render --format pbs` and submit it with qsub." if scheduler.lower() == "pbs" else ".")]
    if scheduler == "none":
        given = [f"slurm_{key}" for key, value in slurm.items() if value not in ("", None, 0, "0")]
        return [f"{', '.join(given)} given without -e scheduler=slurm: add it to launch through Slurm, "
                f"or remove them."] if given else []
    problems = _slurm_conflicts(request["mode"], truthy(request.get("tree_spawn")),
                                "launch_mode")
    try:
        if slurm.get("time_limit"):
            check_time_limit(slurm["time_limit"])
        for key in ("partition", "account"):
            if slurm.get(key):
                check_name(slurm[key], f"slurm_{key}")
    except SlurmError as err:
        problems.append(f"{err}.")
    gpus = str(slurm.get("gpus_per_node", 0))
    if not gpus.isdigit():
        problems.append(f"slurm_gpus_per_node is '{gpus}': give a whole number of GPUs per node (0 for none).")
    return problems


def _from_role_variables(variables: Mapping) -> dict:
    """The request problems() reads, from the launch role's variables as given (untyped: a bad
    value is for problems() to name): each option by its name, the lists, Slurm's and the
    restarts' options gathered."""
    given = {option.name: variables[option.role_name] for option in OPTIONS
             if option.role_name and option.role_name in variables}
    return {**given, "head": given.get("head_node"),
            "lists": {name: given.get(name) or [] for name in LIST_OPTIONS},
            "slurm": {name[len("slurm_"):]: given[name] for name in given
                      if name.startswith("slurm_") and name != "slurm_extra_args"},
            "restart": {name: given[name] for name in RESTART_OPTIONS if name in given}}


def problems(request: dict) -> list[str]:
    """What is wrong with a launch request, one message per problem naming the variable, its
    value and the fix; empty when it is good. `request` is what the launch role's validate.yml
    gathers (see the launch_problems filter's documentation): the role's variables under
    `variables`, and what only the play knows (the nodes, the head's facts)."""
    if "variables" in request:
        request = {**_from_role_variables(request["variables"]),
                   **{key: value for key, value in request.items() if key != "variables"}}
    # -e action=stop was launch.yml's stop before launch_action; Ansible reserves the name.
    given = request.get("reserved_action")
    if given:
        return [f"-e action={given}: Ansible reserves the name action; use -e launch_action={given}"
                + (" (or: torchfleet stop)." if given == "stop" else ".")]
    found = []
    if request["action"] == "restart" and not str(request.get("run_id") or "").strip():
        return ["launch_action=restart starts a run that ended again: name it with -e run_id=RUN_ID "
                "(torchfleet runs lists the runs)."]
    if request["action"] == "start":
        shape = _shape_problem(request)
        if shape:
            return [shape]
        found = _start_problems(request) + _scheduler_problems(request) + restart_problems(
            request.get("restart") or {}, len(run_nodes(request)), request["mode"],
            str(request.get("scheduler") or "none"), fault_tolerance=str(request.get("fault_tolerance") or "none"))
    if request.get("facts_pending"):
        return found  # setup's facts are read back from the nodes next, and checked then
    # setup.yml caches both; a node without them was never set up, or its cache expired.
    without_setup = [node["inventory_hostname"] for node in request["nodes"]
                     if "preflight_net" not in node or "python_env_torchrun" not in node]
    if without_setup:
        found.append(f"No setup facts for {', '.join(without_setup)}: run `ansible-playbook "
                     f"setup.yml -i INVENTORY` first (setup records them on each node, in "
                     f"/etc/ansible/facts.d/torchfleet.fact, and in Ansible's fact cache where one is "
                     f"configured).")
    # python_env_engine=none records no torchrun; without this check the launch would fail on the
    # nodes, looking for a torchrun on PATH.
    elif request["action"] == "start" and request["mode"] != "rank" and not request["head_torchrun"]:
        found.append(f"launch_mode={request['mode']} runs torchrun, but setup recorded none on "
                     f"{request['head']} (python_env_engine=none uses the node's own Python): use -e "
                     f"launch_mode=rank, or set up an environment with PyTorch (python_env_engine=venv "
                     f"or conda).")
    elif request["action"] == "start":
        said = launcher(request).setup_problem(request["head"], request["mode"], {
            "openmpi_mpirun": request.get("head_mpirun"), "mpich_mpiexec": request.get("head_mpiexec")})
        said = said or choice_problem(request["mode"], chosen_flavour(request))
        found += [said] if said else []
    return found


def restart_problems(restart: Mapping, nodes: int, mode: str, scheduler: str, check_nodes: bool = True,
                     fault_tolerance: str = "none") -> list[str]:
    """What is wrong with the restart options (max_restarts, min_nodes, restart_wait,
    final_exit_codes, by those names) for a run on `nodes` nodes; each message names the
    variable, its value and the fix. With fault_tolerance torchft a spare takes a lost node's
    group at once, without a restart."""
    found, values = [], {}
    for key, least in (("max_restarts", 0), ("min_nodes", 0), ("restart_wait", 0), ("spare_nodes", 0),
                       ("rejoin_after", 0)):
        value = restart.get(key, 0)
        if not re.fullmatch(r"-?\d+", str(value).strip()):
            found.append(f"{key} is '{value}': give a whole number (0 or more).")
            continue
        values[key] = int(str(value).strip())
        if values[key] < least:
            found.append(f"{key} is {values[key]}: give 0 or more.")
    spare = values.get("spare_nodes", 0)
    if spare and spare >= nodes:
        found.append(f"spare_nodes is {spare}, but the run has {nodes} node(s) and the head is never a spare: "
                     f"give at most {nodes - 1}.")
    elif spare and values.get("max_restarts", 0) == 0 and fault_tolerance != "torchft":
        found.append(f"spare_nodes is {spare}, but max_restarts is 0: a spare replaces a lost node in a "
                     f"restart; set max_restarts (for example 2), or remove spare_nodes.")
    elif spare and scheduler == "slurm":
        found.append(f"spare_nodes is {spare} under Slurm, where an attempt is an allocation of its own and "
                     f"Slurm chooses its nodes: remove spare_nodes (a restart's job already leaves out the "
                     f"nodes lost).")
    if values.get("min_nodes", 0) > nodes - spare:
        found.append(f"min_nodes is {values['min_nodes']}, above the run's {nodes - spare} nodes"
                     f"{' besides its spares' if spare else ''}: give at most {nodes - spare}, or 0 for every node.")
    codes = restart.get("final_exit_codes") or []
    if not isinstance(codes, list) or any(not str(code).strip().isdigit() or int(code) > 255 for code in codes):
        found.append(f"final_exit_codes is {codes!r}: give a list of exit codes from 0 to 255, for example [2, 3].")
    restarts = launcher_named(mode, None).restarts
    if values.get("max_restarts", 0) > 0 and (scheduler not in ("none", "slurm") or not restarts):
        found.append(f"max_restarts is {values['max_restarts']}, but restarts are made by the supervisor's "
                     f"own mpirun, which {'scheduler=' + scheduler if restarts else 'mode ' + mode} "
                     f"does not use: remove max_restarts, or launch with Open MPI's mpirun (over ssh or "
                     f"under Slurm).")
    elif values.get("max_restarts", 0) > 0 and scheduler == "slurm" and not check_nodes:
        found.append(f"max_restarts is {values['max_restarts']} under Slurm with check_nodes false: the "
                     f"supervisor finds the nodes lost, and those that answer again, over ssh from the head; "
                     f"set check_nodes true, or remove max_restarts (sbatch --requeue reruns a job Slurm ended).")
    return found


def _slurm_conflicts(mode: str, tree_spawn: bool, mode_name: str) -> list[str]:
    """What cannot run under Slurm; `mode_name`: the mode's name where the user gave it."""
    found = []
    if launcher_named(mode, None).slurm_args is None:
        found.append(f"scheduler=slurm runs Open MPI's mpirun inside the allocation; {mode_name}={mode} "
                     f"({launcher_named(mode, None).name}) cannot run under it: use {mode_name}=torchrun or rank.")
    if tree_spawn:
        found.append("scheduler=slurm: Slurm starts mpirun's daemons, so tree_spawn cannot apply; remove it.")
    return found


def heartbeat_problem(value) -> str | None:
    """heartbeat_timeout below what makes a node silent (liveness.SILENT_AFTER) would never be
    reached before the node is silent: refused, naming the floor."""
    floor = math.ceil(SILENT_AFTER)
    if str(value).strip().isdigit() and 0 < int(str(value).strip()) < floor:
        return (f"heartbeat_timeout is {int(str(value).strip())}: a node is silent only after {SILENT_AFTER} s "
                f"without a beat, so the tolerance must be at least {floor} s; give {floor} or more "
                f"(the default, 30, waits out the common network blips), or 0 to leave silent nodes alone.")
    return None


HANG_LEAST = 10  # seconds: below it, a pause between two lines of a healthy run would be a hang


def hang_problem(value) -> str | None:
    """hang_timeout that is neither auto, 0, nor HANG_LEAST seconds or more: refused, naming why."""
    text = str(value if value is not None else "auto").strip()
    if text == "auto" or text == "0" or (text.isdigit() and int(text) >= HANG_LEAST):
        return None
    return (f"hang_timeout is {text!r}: give auto (the default: learned from the run), 0 (never judge a run "
            f"hung), or a number of seconds, {HANG_LEAST} or more, longer than the longest quiet stretch of "
            f"a healthy run (an evaluation, a checkpoint).")


def module_refusal(request) -> str | None:
    """What the module refuses of a request before anything changes, that its argument spec
    cannot say: what cannot run under Slurm (the role's problems() said it earlier, by the
    role's names, but the module is also called directly)."""
    restart = {key: getattr(request, key) for key in RESTART_OPTIONS}
    found = restart_problems(restart, len(request.nodes or ()), request.mode, request.scheduler, request.check_nodes,
                             request.fault_tolerance)
    if request.scheduler == "slurm":
        found += _slurm_conflicts(request.mode, bool(request.tree_spawn), "mode")
    found += [said for said in [heartbeat_problem(request.heartbeat_timeout), hang_problem(request.hang_timeout)] if said]
    return " ".join(found) or None
