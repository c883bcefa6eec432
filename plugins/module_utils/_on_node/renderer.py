# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The one renderer: a launch plan into the launcher's argv, hostfile and environment
(``render``). The torchrun_launch module and ``torchfleet render`` both call it, so what a dry run
shows is what runs; a run's supervisor calls it again for each restart."""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass, field

from .launch_plan import INHERITED, REDACTED, SHELL, SHELL_NAME, Node, Plan
from .launchers import launcher_of
from .plan_checks import validate


@dataclass(frozen=True)
class Rendered:
    argv: list[str]
    hostfile: str
    env: dict[str, str]
    inherit: tuple[str, ...]
    secrets: tuple[str, ...]
    nodes: tuple[str, ...]
    per_node_env: dict[str, dict[str, str]]
    world_size: int
    # fault_tolerance torchft: argv is the Lighthouse's (on the head), and each node's replica
    # group runs this {name: argv} (its own torchrun), over ssh but on the head; {} otherwise.
    groups: dict[str, list[str]] = field(default_factory=dict)

    @property
    def command(self) -> str:
        if self.groups:  # the Lighthouse, then each node's group: what the supervisor starts
            return "\n".join([shlex.join(self.argv)] + [f"[{name}] {shlex.join(argv)}" for name, argv in self.groups.items()])
        return shlex.join(self.argv)

    @property
    def display_env(self) -> dict[str, str]:
        shown = dict(self.env)
        shown.update(dict.fromkeys(self.inherit, INHERITED))
        shown.update(dict.fromkeys(self.secrets, REDACTED))
        return shown


def _script_path(plan: Plan) -> str:
    return plan.request.script or ""  # validate() refused a plan without one


def _launch_order(plan: Plan) -> list[Node]:
    # The launcher numbers nodes in hostfile order: the head first makes it node rank 0.
    head = next(node for node in plan.nodes if node.name == plan.request.head)
    return [head] + [node for node in plan.nodes if node is not head]


def _endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _torchrun_words(plan: Plan, nnodes: int, nproc: int, head: Node, node_rank: str) -> list[str]:
    q = shlex.quote
    words = ["exec", q(plan.request.torchrun)]
    if nnodes == 1:
        words += ["--standalone", "--nnodes=1"]
    else:
        words += [f"--nnodes={nnodes}", f'--node-rank="{node_rank}"']
    words.append(f"--nproc-per-node={nproc}")
    if nnodes > 1:
        # static, not c10d: c10d ignores --node-rank and orders nodes by FQDN, so the head
        # might not be node 0 and a global rank would not tell its node. MPI has fixed the node
        # ranks already; static keeps them, with the store on the head (node 0) at this endpoint.
        words += ["--rdzv-backend=static", q(f"--rdzv-endpoint={_endpoint(head.address, plan.request.master_port)}"),
                  q(f"--rdzv-id={plan.run_id}")]
    if plan.node_log_dir:
        # A directory per node (record.node_workers): a log_dir on storage every node shares
        # never mixes two nodes' files.
        words += [f'--log-dir={q(plan.node_log_dir)}/node"{node_rank if nnodes > 1 else 0}"', "--redirects=3"]
        if plan.tee_workers:
            words.append("--tee=3")
    return words + [q(arg) for arg in plan.request.torchrun_extra_args] + [q(_script_path(plan)), '"$@"']


# Gloo opens every interface listed in GLOO_SOCKET_IFNAME and fails on a node that lacks one,
# so with mixed names each node keeps the first listed interface it actually has.
# (NCCL treats its list as alternatives, so NCCL_SOCKET_IFNAME stays as is.)
_GLOO_PICK = ('IFS=,; for i in $GLOO_SOCKET_IFNAME; do if [ -e "/sys/class/net/$i" ]; then '
              'GLOO_SOCKET_IFNAME=$i; break; fi; done; unset IFS; ')


def _site_prefix(plan: Plan) -> str:
    """The ranks' sitecustomize.py first on PYTHONPATH (before the user's own, which stays), and
    where their stacks go: a supervised run's; "" for a command a person runs."""
    if not plan.site_dir:
        return ""
    return (f'export PYTHONPATH={shlex.quote(plan.site_dir)}"${{PYTHONPATH:+:$PYTHONPATH}}" '
            f'TORCHFLEET_STACKS_DIR={shlex.quote(plan.stacks_dir or "")}; ')


def _script(plan: Plan, nnodes: int, nproc: int, head: Node, mixed_ifaces: bool) -> str:
    # Only plan values go in here, each quoted; user arguments come in as "$@".
    prefix = (_GLOO_PICK if mixed_ifaces else "") + _site_prefix(plan)
    if plan.request.mode != "rank":  # a torchrun agent a node, its node rank the launcher's
        return prefix + " ".join(_torchrun_words(plan, nnodes, nproc, head, launcher_of(plan.request).node_rank))
    # Fail loudly rather than start every process as rank "" when not under Open MPI.
    return (f'{prefix}: "${{OMPI_COMM_WORLD_RANK:?not started by Open MPI mpirun}}"; '
            'export RANK="$OMPI_COMM_WORLD_RANK" LOCAL_RANK="$OMPI_COMM_WORLD_LOCAL_RANK" '
            'WORLD_SIZE="$OMPI_COMM_WORLD_SIZE" LOCAL_WORLD_SIZE="$OMPI_COMM_WORLD_LOCAL_SIZE"; '
            f'exec {shlex.quote(plan.request.python)} {shlex.quote(_script_path(plan))} "$@"')


# A replica group's variables come on its stdin (the supervisor writes them, secrets included,
# then closes it): nothing of them on a command line another account can read on the node.
_GROUP_ENV = 'eval "$(cat)"; '


def lighthouse_path(torchrun: str) -> str:
    """torchft's Lighthouse beside torchrun in the environment (the torchft wheel ships both)."""
    return posixpath.join(posixpath.dirname(torchrun), "torchft_lighthouse") if "/" in torchrun else "torchft_lighthouse"


def _torchft(plan: Plan, order: list[Node], env: dict, nproc: int) -> tuple[list[str], dict, dict]:
    """fault_tolerance torchft: (the Lighthouse's argv, each node's group argv, each node's own
    variables). Each node's torchrun is standalone (its rendezvous on that node); the groups meet
    in the Lighthouse at master_port on the head, whose quorum needs min_nodes of them."""
    q, head = shlex.quote, order[0]
    port = plan.request.master_port
    bind = f"[::]:{port}" if ":" in head.address else f"0.0.0.0:{port}"
    lighthouse = [lighthouse_path(plan.request.torchrun), "--min_replicas", str(max(1, plan.request.min_nodes)),
                  "--bind", bind, "--heartbeat_timeout_ms", str(plan.request.torchft_heartbeat_ms)]
    env.update(TORCHFT_LIGHTHOUSE=f"http://{_endpoint(head.address, port)}", NUM_REPLICA_GROUPS=str(len(order)))
    words = ["exec", q(plan.request.torchrun), "--standalone", "--nnodes=1", f"--nproc-per-node={nproc}"]
    if plan.node_log_dir:  # each group's files where a node's are (record.node_workers)
        words += [f'--log-dir={q(plan.node_log_dir)}/node"$REPLICA_GROUP_ID"', "--redirects=3"]
        if plan.tee_workers:
            words.append("--tee=3")
    words += [q(arg) for arg in plan.request.torchrun_extra_args] + [q(_script_path(plan)), '"$@"']
    argv = [SHELL, "-c", _GROUP_ENV + _site_prefix(plan) + " ".join(words), SHELL_NAME, *plan.request.script_args]
    own = {node.name: {"REPLICA_GROUP_ID": str(index), **({"GLOO_SOCKET_IFNAME": node.interface} if node.interface else {})}
           for index, node in enumerate(order)}
    return lighthouse, {node.name: list(argv) for node in order}, own


def render(plan: Plan) -> Rendered:
    """Validate `plan` and render argv, hostfile and environment for its launcher."""
    validate(plan)
    order = _launch_order(plan)
    head = order[0]
    nnodes = len(order)
    ifaces = list(dict.fromkeys(node.interface for node in order if node.interface))
    mixed_ifaces = len(ifaces) > 1

    env = {"TORCHFLEET_RUN_ID": plan.run_id}
    if ifaces:
        env["NCCL_SOCKET_IFNAME"] = env["GLOO_SOCKET_IFNAME"] = ",".join(ifaces)
    if plan.request.mode == "rank":
        env["MASTER_ADDR"] = head.address
        env["MASTER_PORT"] = str(plan.request.master_port)
    env.update(plan.env_set)
    inherit = tuple(dict.fromkeys(plan.env_pass))
    secrets = tuple(dict.fromkeys(plan.env_secrets))
    # Mixed names: validate() refused a node without an interface.
    per_node_env = ({node.name: {"GLOO_SOCKET_IFNAME": str(node.interface)} for node in order}
                    if mixed_ifaces else {})

    if plan.request.mode == "rank":
        world_size = sum(node.slots for node in order)
        nproc = 0  # unused: each rank is one worker
    else:
        nproc = plan.request.nproc_per_node or head.slots
        world_size = nproc * nnodes
    if plan.request.fault_tolerance == "torchft":
        argv, groups, per_node_env = _torchft(plan, order, env, nproc)
        return Rendered(argv=argv, hostfile="", env=env, inherit=inherit, secrets=secrets,
                        nodes=tuple(node.name for node in order), per_node_env=per_node_env,
                        world_size=world_size, groups=groups)
    script = _script(plan, nnodes, nproc, head, mixed_ifaces)
    tail = [SHELL, "-c", script, SHELL_NAME, *plan.request.script_args]

    launcher = launcher_of(plan.request)
    hostfile = launcher.hostfile(order)
    argv = launcher.argv(plan, order, ifaces, [*env, *inherit, *secrets], world_size, tail)

    return Rendered(argv=argv, hostfile=hostfile, env=env, inherit=inherit, secrets=secrets,
                    nodes=tuple(node.name for node in order), per_node_env=per_node_env,
                    world_size=world_size)
