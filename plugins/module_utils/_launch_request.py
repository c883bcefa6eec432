# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The launch request: every launch option declared once, and the one place it is read.

``OPTIONS`` is the table. From it come the torchrun_launch module's argument spec
(``argument_spec()``), the launch role's ``meta/argument_specs.yml`` and ``defaults/main.yml``
and launch.yml's short names (``tools/write_launch_options.py`` writes them; ``make lint`` fails
when they are out of date). ``problems(request)`` checks a request on the controller before
anything on a node changes; ``resolve(request, nodes, ...)`` turns it into the renderer's
``Plan``. The launch role (through its filters), the module, ``torchfleet render`` and
``torchfleet launch`` all call these, so an option is interpreted in one place.

Standard library only: the CLI imports this file outside Ansible.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_plan import (
    DEFAULT_PORT, Node, Plan, node_slots, run_log_dirs)
from ansible_collections.torchfleet.cluster.plugins.module_utils._head.slurm import (
    SlurmError, check_name, check_time_limit)

ROLE_PREFIX = "launch_"
_UNSET = object()


@dataclass(frozen=True)
class Option:
    """One launch option. `name` is the module's option and the request's key; the launch role
    takes it as launch_NAME (`role`), and a user on the command line as `short`."""
    name: str
    type: str
    doc: str
    default: object = None
    choices: tuple = ()
    elements: str | None = None
    no_log: bool | None = None
    module: bool = True  # an option of the torchrun_launch module
    role: str | None = ""  # the role's variable ("": launch_NAME; None: not the role's)
    role_type: str | None = None  # raw where the role's own check names a bad value better
    role_default: object = _UNSET  # where the role's differs; "{{ ... }}" is computed
    role_choices: tuple | None = None
    role_elements: str | None = None
    short: str | None = None  # the name typed with -e (launch.yml maps it to the role's)

    @property
    def role_name(self) -> str | None:
        if self.role is None:
            return None
        return self.role or (self.name if self.name.startswith(ROLE_PREFIX) else ROLE_PREFIX + self.name)


OPTIONS: tuple[Option, ...] = (
    # The module's own inputs, from the role's resolution of the inventory and setup's facts.
    Option("state", "str", "started launches a run and waits for it; stopped stops runs on this node; "
           "restarted starts a failed, lost, stopped or timed-out run (run_id) again from its own request, "
           "as its next attempt, and waits for it.",
           default="started", choices=("started", "stopped", "restarted"), role=None),
    Option("nodes", "list", "The nodes of the run (name, address, slots, interface).", elements="dict",
           role=None),
    Option("head", "str", "The node that runs the launcher and hosts the rendezvous.", role=None),
    Option("action", "str", "Start a run, stop the runs on every node, or restart a run that ended "
           "(run_id) from its own request.", module=False, default="start", choices=("start", "stop", "restart")),
    Option("script", "path", "The training script (on the controller; on the nodes with shared_storage).",
           role_type="str", role_default="", short="script"),
    Option("script_args", "list", "Arguments passed to every rank exactly as given.", default=[],
           elements="str", short="script_args"),
    Option("files", "list", "More files on the controller that the script needs, copied beside it "
           "(16 MiB in all with the script: code and configuration, not data).", module=False,
           default=[], elements="str", short="files"),
    Option("shared_storage", "bool", "The nodes see the script at that path already; copy nothing.",
           module=False, default=False, short="shared_storage"),
    Option("run_id", "str", "The run's id (made when empty); with action stop, only this run.",
           role_default="", short="run_id"),
    Option("mode", "str", "torchrun (one torchrun per node) or rank (one MPI rank per worker) with "
           "Open MPI, or mpich (one torchrun per node with MPICH's mpiexec).", default="torchrun",
           choices=("torchrun", "rank", "mpich")),
    Option("mpich_launcher", "str", "With mode mpich, which mpiexec runs: hydra (MPICH's Hydra, Intel "
           "MPI) or pals (HPE Cray PALS); default what setup read from mpiexec --version.",
           choices=("hydra", "pals"), role_choices=(),
           role_default="{{ hostvars[launch_head].mpich_found_launcher | default('') }}",
           short="mpich_launcher"),
    Option("master_port", "int", "Rendezvous port on the head node, a number from 1024 to 65535.",
           default=DEFAULT_PORT, role_type="raw", short="master_port"),
    Option("nproc_per_node", "int", "Workers per node: auto (the GPU count setup found, 1 without GPUs) "
           "or a number, the same on every node.", role_type="raw", role_default="auto",
           short="nproc_per_node"),
    Option("python", "str", "Python interpreter on the nodes (rank mode).", default="python3", role=None),
    Option("torchrun", "str", "torchrun on the nodes (torchrun and mpich modes).", default="torchrun",
           role=None),
    Option("launcher", "str", "Path of mpirun or mpiexec on the head.", role=None),
    Option("network", "str", "The cluster network as a CIDR, for Open MPI's own traffic.", role=None),
    Option("env_pass", "list", "Environment names passed to every rank (PATH, LD_LIBRARY_PATH and "
           "NCCL_* when set).", default=[], elements="str", no_log=False, short="env_pass"),
    Option("env_secrets", "dict", "Names of secrets read from the controller's environment and passed "
           "to every rank, never printed.", default={}, no_log=True, role_type="list", role_default=[],
           role_elements="str", short="env_secrets"),
    Option("env_set", "dict", "Values set for every rank.", default={}, short="env_set"),
    Option("mpirun_extra_args", "list", "More launcher options, each option and each value an item of "
           "its own; those torchfleet controls, and shell characters, are refused.", default=[],
           elements="str", short="mpirun_extra_args"),
    Option("allow_run_as_root", "bool", "Pass --allow-run-as-root to Open MPI.", default=False, role=None),
    Option("tree_spawn", "bool", "Let Open MPI's daemons start further daemons over ssh (hundreds of "
           "nodes); every node must then hold the cluster's private key.", default=False,
           short="tree_spawn"),
    Option("share_nodes", "bool", "Launch even where another account's torchfleet run is alive on the "
           "nodes (the run board, set up on every node); false refuses such a launch, naming that run.",
           default=False, short="share_nodes"),
    Option("workdir", "str", "The training account's directory for torchfleet on the nodes (setup's "
           "cluster_user_workdir).", module=False, default="~/torchfleet", short="cluster_user_workdir"),
    Option("log_dir", "path", "Directory on the nodes holding one directory of logs per run; absolute, "
           "or under ~ (default workdir/runs).", default="~/torchfleet/runs", role_type="str",
           role_default="{{ launch_workdir }}/runs", short="log_dir"),
    Option("script_dir", "str", "Where scripts are copied on the nodes, the run's working directory "
           "(default workdir/scripts).", module=False, role_default="{{ launch_workdir }}/scripts"),
    Option("launch_timeout", "int", "Seconds after which the run is stopped; 0 for no limit.", default=0),
    Option("start_timeout", "int", "Seconds from the launcher's start to a process of the run on every "
           "node; a launch past it is ended, naming the nodes where none started. 0 for no limit.",
           default=180),
    Option("heartbeat_timeout", "int", "Seconds a node may be silent (no beat from it over its ssh session "
           "with the head) before it is lost, which ends the attempt, naming it; a node whose session closes "
           "and that no longer answers (killed, crashed, rebooted) is acted on at once. Shorter silences (a "
           "network blip, a pause) are waited out, as mpirun and torchrun wait; 0 leaves a silent node to "
           "silent_node_timeout.", default=30),
    Option("max_restarts", "int", "Restart a run that failed for a reason a restart can help (a node lost "
           "or cut off, a rank killed by a signal, a rank's non-zero exit not in final_exit_codes) up to "
           "this many times, on the nodes that answer, each attempt with TORCHFLEET_RESTART_COUNT set; 0 "
           "never restarts. Open MPI modes, over ssh or under Slurm (a new job, without the nodes lost).", default=0, role_type="raw", short="max_restarts"),
    Option("min_nodes", "int", "The fewest nodes an attempt may use; fewer answering, the supervisor "
           "waits restart_wait seconds for lost nodes to come back, then ends the run. 0: every node of "
           "the run.", default=0, role_type="raw", short="min_nodes"),
    Option("restart_wait", "int", "Seconds a restart waits for min_nodes nodes to answer.", default=300,
           role_type="raw", short="restart_wait"),
    Option("spare_nodes", "int", "Nodes of the group kept out of the world (the last ones, never the head), "
           "set up and checked like the others: with max_restarts, a lost node is replaced by a spare in the "
           "next attempt, so the world size does not change. No spare left, the run shrinks (down to min_nodes) "
           "or ends. Not under Slurm.", default=0, role_type="raw", short="spare_nodes"),
    Option("rejoin_after", "int", "With max_restarts: seconds a node lost earlier must keep answering (and pass "
           "the launch's checks) before the run grows back to it, right after the script's next checkpoint "
           "(a line of rank 0's stdout that begins with TORCHFLEET_CHECKPOINT).", default=10, role_type="raw",
           short="rejoin_after"),
    Option("final_exit_codes", "list", "Rank exit codes that end the run without a restart (the script "
           "saying its failure is its own: bad input, a diverged loss).", default=[], elements="int",
           role_elements="raw", short="final_exit_codes"),
    Option("silent_node_timeout", "int", "Open MPI modes: seconds after which a node gone silent (off "
           "the network, powered off) ends the run, named; 0 leaves Open MPI's keepalive (480 s at "
           "best).", default=120),
    Option("stop_grace", "int", "Seconds between TERM and KILL when a run is stopped.", default=10),
    Option("chdir", "path", "The launcher's working directory on the head.", role=None),
    Option("file_contents", "dict", "Files the run needs at the same path on every node, path to "
           "base64 content.", default={}, no_log=True, role=None),
    Option("check_nodes", "bool", "Check every other node from the head over ssh before the start.",
           default=True, role=None),
    Option("expect_packages", "dict", "The packages setup installed, refused where a node drifted.",
           default={}, role=None),
    Option("detach", "bool", "Return once the run's processes run on every node instead of waiting "
           "for its end; the run belongs to its supervisor on the head either way.", default=False,
           short="detach"),
    Option("detach_when", "str", "With detach, return once the run's processes run (running; under "
           "Slurm once the job runs), or once the supervisor holds it (submitted).", default="running",
           choices=("running", "submitted"), short="detach_when"),
    Option("scheduler", "str", "none: mpirun on the head reaches the nodes over ssh; slurm: the run "
           "is a Slurm batch job submitted with sbatch on the head. The role's default is slurm where "
           "setup set Slurm up (scheduler=slurm), else none.", default="none",
           choices=("none", "slurm"), role_choices=(),
           role_default="{{ 'slurm' if hostvars[launch_head].slurm_installed is defined else 'none' }}",
           short="scheduler"),
    Option("slurm_partition", "str", "With scheduler slurm, the partition; empty for Slurm's default.",
           role_default="", short="slurm_partition"),
    Option("slurm_account", "str", "With scheduler slurm, the account charged.", role_default="",
           short="slurm_account"),
    Option("slurm_time_limit", "str", "With scheduler slurm, the job's time limit as sbatch --time "
           "takes it (90, 01:30:00, 1-00:00:00); empty for the partition's.", role_default="",
           short="slurm_time_limit"),
    Option("slurm_gpus_per_node", "int", "With scheduler slurm, GPUs per node requested as GRES "
           "(--gpus-per-node); 0 for none.", role_type="raw", role_default=0, short="slurm_gpus_per_node"),
    Option("slurm_extra_args", "list", "With scheduler slurm, the site's own sbatch options (qos, "
           "constraint, reservation), one item each as '--option=value'.", default=[], elements="str",
           short="slurm_extra_args"),
    Option("batch_whole_nodes", "bool", "With scheduler slurm, take whole nodes (--exclusive --mem=0): "
           "every CPU and all memory for a node's workers; false asks for one task's share.",
           default=True, short="batch_whole_nodes"),
    Option("exclude", "list", "Nodes of the group left out of this run (a list, or names joined by ','), "
           "as --limit leaves out those it does not name; never the head.", module=False, role_type="raw",
           role_default=[], short="exclude"),
    Option("group", "str", "The inventory group of the cluster's nodes (torchfleet_group, else cluster).",
           module=False, role_default="{{ torchfleet_group | default('cluster') }}"),
    Option("head_node", "str", "The node that runs the launcher and hosts the rendezvous (torchfleet_head, "
           "else the group's first node).", module=False, role="launch_head",
           role_default="{{ torchfleet_head | default(groups[launch_group][0]) }}"),
    Option("user", "str", "The training account the run belongs to (setup's cluster_user_name).",
           module=False, default="torchfleet", short="cluster_user_name"),
)
BY_NAME = {option.name: option for option in OPTIONS}
# The module's nodes, one dict each (the launch_nodes filter makes them from setup's facts).
NODE_OPTIONS = {
    "name": {"type": "str", "required": True},
    "address": {"type": "str", "required": True},
    "slots": {"type": "int", "required": True},
    "interface": {"type": "str"},
}


def argument_spec() -> dict:
    """The torchrun_launch module's argument spec."""
    spec = {}
    for option in OPTIONS:
        if not option.module:
            continue
        entry = {"type": option.type}
        for key in ("default", "elements", "no_log"):
            if getattr(option, key) is not None:
                entry[key] = getattr(option, key)
        if option.choices:
            entry["choices"] = list(option.choices)
        if option.name == "nodes":
            entry["options"] = NODE_OPTIONS
        spec[option.name] = entry
    return spec


def role_options() -> dict:
    """{role variable: (its argument spec entry, its default)} of the launch role, in table order;
    a default of _UNSET means the role has none."""
    options = {}
    for option in OPTIONS:
        if option.role_name is None:
            continue
        kind = option.role_type or option.type
        kind = "str" if kind == "path" else kind
        default = option.default if option.role_default is _UNSET else option.role_default
        entry = {"type": kind}
        elements = option.role_elements or (option.elements if kind == "list" else None)
        if elements:
            entry["elements"] = elements
        choices = option.choices if option.role_choices is None else option.role_choices
        if choices:
            entry["choices"] = list(choices)
        if default is not None and "{{" not in json.dumps(default):
            entry["default"] = default
        entry["description"] = option.doc
        options[option.role_name] = (entry, default)
    return options


def short_names() -> dict:
    """{name typed with -e: [the role variables that take its value]}, as launch.yml maps them."""
    return {option.short: [option.role_name] for option in OPTIONS if option.short}


# ---------------------------------------------------------------------------------------------
# Checks, on the controller, before anything on a node changes
# ---------------------------------------------------------------------------------------------

EXAMPLE_LISTS = {
    "script_args": ["--epochs", "3"],
    "files": ["data.csv"],
    "env_pass": ["NCCL_DEBUG"],
    "env_secrets": ["WANDB_API_KEY"],
    "mpirun_extra_args": ["--mca", "btl_tcp_links", "2"],
}
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


def port_problem(value) -> str | None:
    port = str(value)
    if not (port.isdigit() and 1024 <= int(port) <= 65535):
        return (f"master_port is '{port}': give the rendezvous port on the head as a number "
                f"from 1024 to 65535 (default {DEFAULT_PORT}).")
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


def by_pals(request: dict) -> bool:
    """Cray PALS starts the nodes' processes itself: Ansible copies the files, not the module."""
    return request["mode"] == "mpich" and request.get("mpich_launcher") == "pals"


def _start_problems(request: dict) -> list[str]:
    lists = request["lists"]
    problems = []
    shared = request["shared_storage"]
    if not shared and not os.path.isfile(request["script"]):
        problems.append(f"The script {request['script']} is not a file on the controller. Give its path "
                        f"(relative to where you run ansible-playbook), or -e shared_storage=true when "
                        f"the nodes already see it at that path.")
    missing = [] if shared else [path for path in lists["files"] if not os.path.isfile(path)]
    if missing:
        problems.append(f"These files are not on the controller: {', '.join(missing)}.")
    elif not shared and not by_pals(request) and os.path.isfile(request["script"]):
        problems += _size_problems([request["script"], *lists["files"]])
    problems += _nproc_problems(request)
    said = port_problem(request["master_port"])
    if said:
        problems.append(said)
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
    unset = [name for name in lists["env_secrets"] if not os.environ.get(name)]
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
    problems = _slurm_conflicts(request["mode"], str(request.get("tree_spawn")).lower() in ("true", "yes", "1"),
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


LIST_OPTIONS = ("script_args", "files", "env_pass", "env_secrets", "mpirun_extra_args")
RESTART_OPTIONS = ("max_restarts", "min_nodes", "restart_wait", "final_exit_codes", "spare_nodes", "rejoin_after")
# The options problems() reads; validate.yml hands it these alone (each variable templated costs
# the launch time), as tools/write_launch_options.py writes them.
CHECKED_OPTIONS = ("action", "script", *LIST_OPTIONS, "shared_storage", "run_id", "mode", "mpich_launcher",
                   "master_port", "nproc_per_node", "tree_spawn", "log_dir", *RESTART_OPTIONS, "scheduler",
                   "slurm_partition", "slurm_account", "slurm_time_limit", "slurm_gpus_per_node", "group",
                   "head_node", "exclude")


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
            str(request.get("scheduler") or "none"))
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
    elif request["action"] == "start" and request["mode"] in ("torchrun", "mpich") and not request["head_torchrun"]:
        found.append(f"launch_mode={request['mode']} runs torchrun, but setup recorded none on "
                     f"{request['head']} (python_env_engine=none uses the node's own Python): use -e "
                     f"launch_mode=rank, or set up an environment with PyTorch (python_env_engine=venv "
                     f"or conda).")
    elif request["action"] == "start" and request["mode"] == "mpich":
        found += _mpich_problems(request)
    elif request["action"] == "start" and request.get("head_mpiexec") and not request.get("head_mpirun"):
        # Plain mpirun would be MPICH's there (the alternative), and fail on Open MPI's options.
        found.append(f"launch_mode={request['mode']} runs Open MPI's mpirun, but setup installed MPICH "
                     f"alone on {request['head']}: use -e launch_mode=mpich, or run `ansible-playbook "
                     f"setup.yml -i INVENTORY` (mpi_implementation=openmpi) to add Open MPI beside it.")
    return found


def _mpich_problems(request: dict) -> list[str]:
    if not request.get("head_mpiexec"):
        return [f"launch_mode=mpich runs MPICH's mpiexec, but setup recorded none on {request['head']}: "
                f"run `ansible-playbook setup.yml -i INVENTORY -e mpi_implementation=mpich` first (MPICH "
                f"goes beside Open MPI; each is called by its full path)."]
    if request.get("mpich_launcher") not in ("hydra", "pals"):
        return [f"mpich_launcher is '{request.get('mpich_launcher')}': give hydra (MPICH's Hydra, Intel "
                f"MPI) or pals (HPE Cray PALS), or leave it unset for what setup read from mpiexec."]
    return []


# ---------------------------------------------------------------------------------------------
# Resolution: the request and setup's facts -> the renderer's plan
# ---------------------------------------------------------------------------------------------

def restart_problems(restart: Mapping, nodes: int, mode: str, scheduler: str, check_nodes: bool = True) -> list[str]:
    """What is wrong with the restart options (max_restarts, min_nodes, restart_wait,
    final_exit_codes, by those names) for a run on `nodes` nodes; each message names the
    variable, its value and the fix."""
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
    elif spare and values.get("max_restarts", 0) == 0:
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
    if values.get("max_restarts", 0) > 0 and (scheduler not in ("none", "slurm") or mode == "mpich"):
        found.append(f"max_restarts is {values['max_restarts']}, but restarts are made by the supervisor's "
                     f"own mpirun, which {'scheduler=' + scheduler if mode != 'mpich' else 'mode mpich'} "
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
    if mode == "mpich":
        found.append(f"scheduler=slurm runs Open MPI's mpirun inside the allocation; {mode_name}=mpich "
                     f"(MPICH's mpiexec) cannot run under it: use {mode_name}=torchrun or rank.")
    if tree_spawn:
        found.append("scheduler=slurm: Slurm starts mpirun's daemons, so tree_spawn cannot apply; remove it.")
    return found


def module_refusal(request: Mapping) -> str | None:
    """What the module refuses of a request before anything changes, that its argument spec
    cannot say: what cannot run under Slurm (the role's problems() said it earlier, by the
    role's names, but the module is also called directly)."""
    req = with_defaults(request)
    restart = {key: req[key] for key in RESTART_OPTIONS}
    found = restart_problems(restart, len(req["nodes"] or ()), req["mode"], req["scheduler"], req["check_nodes"])
    if req["scheduler"] == "slurm":
        found += _slurm_conflicts(req["mode"], bool(req["tree_spawn"]), "mode")
    return " ".join(found) or None


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


def with_defaults(request: Mapping) -> dict:
    """The request with every module option it leaves out at the table's default."""
    filled = {option.name: option.default for option in OPTIONS if option.module}
    filled.update({key: value for key, value in request.items() if value is not None})
    return filled


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
