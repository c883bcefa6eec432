# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The launch options, each declared once: the table (``OPTIONS``) and what follows from it.

From the table come the torchrun_launch module's argument spec (``argument_spec()``), the launch
role's ``meta/argument_specs.yml`` and ``defaults/main.yml`` and launch.yml's short names
(``tools/write_launch_options.py`` writes them; ``make lint`` fails when they are out of date),
and every option's default (``with_defaults``). The checks are in _launch_checks.py, the
resolution of a request into the renderer's plan in _launch_request.py.

Standard library only: the CLI imports this file outside Ansible.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from ansible_collections.torchfleet.cluster.plugins.module_utils._head.launch_plan import DEFAULT_PORT

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


LIST_OPTIONS = ("script_args", "files", "env_pass", "env_secrets", "mpirun_extra_args")
RESTART_OPTIONS = ("max_restarts", "min_nodes", "restart_wait", "final_exit_codes", "spare_nodes", "rejoin_after")
# The options problems() reads; validate.yml hands it these alone (each variable templated costs
# the launch time), as tools/write_launch_options.py writes them.
CHECKED_OPTIONS = ("action", "script", *LIST_OPTIONS, "shared_storage", "run_id", "mode", "mpich_launcher",
                   "master_port", "nproc_per_node", "tree_spawn", "log_dir", *RESTART_OPTIONS, "scheduler",
                   "slurm_partition", "slurm_account", "slurm_time_limit", "slurm_gpus_per_node", "group",
                   "head_node", "exclude")


def with_defaults(request: Mapping) -> dict:
    """The request with every module option it leaves out at the table's default."""
    filled = {option.name: option.default for option in OPTIONS if option.module}
    filled.update({key: value for key, value in request.items() if value is not None})
    return filled
