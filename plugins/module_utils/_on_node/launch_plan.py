# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The launch plan: what one launch is (``Plan`` on ``Node`` s), made from the launch request
(``plan_for``), and its run ids and log layout.

The module, ``torchfleet render`` and a run's supervisor (which renders each restart again) share
it; plan_checks.py checks a plan, renderer.py turns it into the launcher's argv, hostfile and
environment. Pure: standard library only, no I/O, no subprocess, no reads of ``os.environ``; the
files of the renderer import each other relatively, so they run in the head package too. How a
launch looks: docs/launch_plan.md.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType

from .launch_request import LaunchRequest
from .launchers import launcher_of

MODES = ("torchrun", "rank", "mpich")
FAULT_TOLERANCE = ("none", "torchft")  # how a run survives a lost node: a restart, or torchft's groups
DEFAULT_PORT = 29500  # the rendezvous port on the head when none is given (torchrun's own default)
PORTS = range(1024, 65536)  # a rendezvous port: none of the privileged ones
SHELL = "/bin/sh"
SHELL_NAME = "torchfleet"  # $0 of the remote sh: names it in its own error messages
INHERITED = "<inherited>"
REDACTED = "<redacted>"

# A run id names a directory and a board entry: no leading dot, no "..". The CLI checks with it too.
RUN_ID = re.compile(r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

# Variables torchfleet sets itself; a user value would silently break the launch.
RESERVED_ENV = frozenset({
    "TORCHFLEET_RUN_ID", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT",
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
    "TORCHFT_LIGHTHOUSE", "REPLICA_GROUP_ID", "NUM_REPLICA_GROUPS",
})


class PlanError(ValueError):
    """A plan that cannot be launched; the message names the problem and the fix."""


@dataclass(frozen=True)
class Node:
    name: str  # inventory name, used in messages
    address: str  # address on the cluster network; goes into the hostfile
    slots: int  # workers (GPUs) on this node
    interface: str | None = None  # NIC holding `address`; required when there are 2+ nodes

    @classmethod
    def of(cls, entry: Mapping) -> Node:
        """A node of the request or of run.json (a dict)."""
        return cls(entry["name"], entry["address"], entry["slots"], entry.get("interface"))


@dataclass(frozen=True, kw_only=True)
class Plan:
    """One launch as the renderer takes it: the request (what was asked: the mode, the script and
    its arguments, the port, the tools' paths, the extra arguments; its head names the rendezvous
    host and rank 0) on its nodes, with what the launch resolved for this run."""
    request: LaunchRequest
    nodes: tuple[Node, ...]  # in any order; the head is moved first
    run_id: str  # [A-Za-z0-9_.-]{1,64}; exported as TORCHFLEET_RUN_ID, used as --rdzv-id
    hostfile_path: str  # where the caller writes `Rendered.hostfile` on the head
    log_dir: str | None = None  # per-rank logs (Open MPI --output-filename)
    node_log_dir: str | None = None  # torchrun/mpich: each node's torchrun keeps worker logs here
    # torchrun's --tee: the workers' output also reaches the launcher's (where nothing else can
    # read the nodes' files: a batch job, PALS). Its copies can lose and glue lines, so a launch
    # whose head reads the files themselves leaves it off.
    tee_workers: bool = True
    env_pass: tuple[str, ...] = ()  # names forwarded from the launcher's environment
    env_secrets: tuple[str, ...] = ()  # as env_pass, but never displayed
    env_set: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    ssh_control_path: str | None = None  # Open MPI: ssh masters the caller opened to the nodes
    # A supervised run's ranks import the sitecustomize.py in site_dir first (stacks.SITE), which
    # arms the dump of their stacks into stacks_dir when the run hangs; None for a command
    # rendered for a person to run.
    site_dir: str | None = None
    stacks_dir: str | None = None


def node_slots(gpu_count, nproc_per_node) -> int:
    """A node's workers: nproc_per_node, or with auto one per GPU and one on a node without GPUs."""
    if str(nproc_per_node) == "auto":
        return max(int(gpu_count or 0), 1)
    return int(nproc_per_node)


def new_run_id(now: datetime | None = None, token: str | None = None) -> str:
    """A new run's id, made here alone (by the CLI, which follows the run it starts, and by the
    module where a playbook gave none): tf-YYYYMMDD-HHMMSS-TOKEN, the UTC time and a random
    token, so ids sort by start time and two launches in the same second stay apart."""
    now = now or datetime.now(timezone.utc)
    return f"tf-{now:%Y%m%d-%H%M%S}-{token or secrets.token_hex(3)}"


def run_log_dirs(run_dir: str, request) -> tuple[str | None, str | None]:
    """(per-rank files of the launcher on each node, torchrun's per-worker logs on each node)
    under a run's directory; None where the request's launcher or mode keeps no such logs."""
    ranks = f"{run_dir}/ranks" if launcher_of(request).rank_files else None
    workers = f"{run_dir}/workers" if request.mode != "rank" else None
    return ranks, workers


def port_problem(value) -> str | None:
    """Why `value` is no rendezvous port (as a variable gives it: a number or its text); None for one."""
    port = str(value)
    if isinstance(value, bool) or not (port.isdigit() and int(port) in PORTS):
        return (f"master_port is '{port}': give the rendezvous port on the head as a number from {PORTS[0]} "
                f"to {PORTS[-1]} (default {DEFAULT_PORT}).")
    return None


def reads_worker_files(request) -> bool:
    """Whether the head reads the ranks' output from torchrun's files on each node (over the
    cluster's ssh; under Slurm too, where the head checks the nodes over ssh: a batch job's
    output would be torchrun's --tee copies, which lose and glue lines); otherwise torchrun
    copies it to the launcher's output (--tee): PALS nodes take no ssh."""
    return request.mode != "rank" and launcher_of(request).over_ssh and (
        request.scheduler == "none" or (request.scheduler == "slurm" and request.check_nodes))


def plan_for(request: LaunchRequest, nodes, *, run_id: str, run_dir: str, env_pass=(), env_secrets=(), env_set=None,
             control_path: str | None = None, supervised: bool = False, site_dir: str | None = None) -> Plan:
    """The renderer's plan for `request` (the module's, or the supervisor's from run.json) on
    `nodes` (Node, or their dicts). The environment
    comes resolved by the caller, who alone sees it: names to pass (`env_pass`), secret names, and
    values to set. `site_dir`: where the ranks' sitecustomize.py is (stacks.site_dir), for a
    supervised run. `supervised`: the launch module's run, whose follower reads the workers' files
    where it can; a command rendered for a person to run keeps torchrun's --tee (the output on
    the terminal)."""
    ranks, workers = run_log_dirs(run_dir, request)
    return Plan(
        request=request, nodes=tuple(node if isinstance(node, Node) else Node.of(node) for node in nodes),
        run_id=run_id, hostfile_path=f"{run_dir}/hostfile", log_dir=ranks, node_log_dir=workers,
        env_pass=tuple(env_pass), env_secrets=tuple(env_secrets),
        env_set=dict(request.env_set if env_set is None else env_set),
        ssh_control_path=control_path, tee_workers=not (supervised and reads_worker_files(request)),
        site_dir=site_dir, stacks_dir=f"{run_dir}/stacks" if site_dir else None,  # stacks.STACKS_DIR
    )


def plan_of_run(run) -> Plan:
    """The renderer's plan of a run from its supervisor's plan (record.SupervisorPlan, run.json):
    its request on every node of it, resolved as the launch resolved it, for an attempt to render
    again (on the nodes that answer, with a port of its own)."""
    return plan_for(run.request, run.request.nodes, run_id=run.run_id, run_dir=run.paths["run"],
                    env_pass=run.env_pass, env_secrets=run.request.env_secrets, env_set=run.env_set,
                    control_path=f"{run.control_dir}/%C" if run.control_dir else None, supervised=True,
                    site_dir=run.paths.get("site"))
