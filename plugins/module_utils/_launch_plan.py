# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Turn a torchfleet launch plan into the launcher's argv, hostfile and environment.

This is the one renderer: the ``torchrun_launch`` module and ``torchfleet render`` both call it,
so what a dry run shows is what runs. It is pure: standard library only, no I/O, no subprocess,
no reads of ``os.environ``.

Public API
----------
``PlanError(ValueError)``
    Raised for any plan that cannot be launched; the message names the problem and the fix.
``Node(name, address, slots, interface=None)``
    ``address`` is the node's address on the cluster network (it goes into the hostfile);
    ``slots`` its worker count (GPUs); ``interface`` the NIC holding ``address``.
``Plan(*, nodes, head, script, run_id, hostfile_path, ...)``
    Keyword-only; see the field comments on the class. ``validate(plan)`` checks it all.
``RESERVED_ENV``
    Variable names torchfleet sets itself; no plan may pass or set them.
``validate(plan) -> None``
    Raises ``PlanError`` on the first problem found.
``render(plan) -> Rendered``
    Validates, then returns ``Rendered`` with:

    - ``argv``: list for the launcher, run without a shell on the head node;
    - ``hostfile``: text the caller writes to ``plan.hostfile_path`` (head first);
    - ``env``: names and values the caller sets in the launcher's own environment;
    - ``inherit`` / ``secrets``: names the launcher must already have in its environment
      (``env_pass`` / ``env_secrets``); their values never pass through here;
    - ``nodes``: node names in MPI node-rank order (head first);
    - ``per_node_env``: values that differ on a node from ``env`` (only Gloo's interface,
      when nodes use different interface names); empty otherwise;
    - ``world_size``: total number of training processes;
    - ``command`` (property): ``argv`` as one shell-quoted string, for display;
    - ``display_env`` (property): ``env`` plus inherited names as ``<inherited>`` and secret
      names as ``<redacted>``.

How a launch looks (the one shell and its quoting, each mode's launcher, the MCA choices, the
hostfile, the environment, what mpirun_extra_args may not override): docs/launch_plan.md.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

MODES = ("torchrun", "rank", "mpich")
DEFAULT_PORT = 29500  # the rendezvous port on the head when none is given (torchrun's own default)
MPICH_LAUNCHERS = ("hydra", "pals")
SHELL = "/bin/sh"
SHELL_NAME = "torchfleet"  # $0 of the remote sh: names it in its own error messages
INHERITED = "<inherited>"
REDACTED = "<redacted>"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RUN_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # the CLI checks its run ids with it too
_IFNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")  # Linux: at most 15 characters
_ADDRESS = re.compile(r"[A-Za-z0-9:][A-Za-z0-9._:-]{0,252}")  # DNS name or IP literal
# Interfaces that exist on a node but never carry cluster traffic (docker0 and the like: NCCL and Gloo hang on them).
_BAD_IF_PREFIXES = ("docker", "virbr", "br-", "veth")

# Variables torchfleet sets itself; a user value would silently break the launch.
RESERVED_ENV = frozenset({
    "TORCHFLEET_RUN_ID", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT",
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
})


def _both_dashes(*names: str) -> set[str]:
    return {dash + name for name in names for dash in ("-", "--")}


# Options in mpirun_extra_args that would override what torchfleet controls (both launchers'
# spellings, so a plan cannot slip one past by naming the other launcher's form).
_OWNED_OPTIONS = {"-n", "-c", "-N", "-H", "-f"} | _both_dashes(
    "np", "n", "npernode", "ppn", "ppr", "hostfile", "machinefile", "default-hostfile", "host",
    "hosts", "map-by", "rank-by", "bind-to", "cpu-bind", "output-filename", "allow-run-as-root",
    "launcher", "iface", "prepend-rank", "outfile-pattern", "errfile-pattern",
)
# Environment options: values on a command line show in `ps` and in logs.
_ENV_OPTIONS = {"-x"} | _both_dashes(
    "env", "envall", "envnone", "envlist", "genv", "genvall", "genvnone", "genvlist",
)
_MCA_OPTIONS = _both_dashes("mca", "gmca")
_OWNED_MCA = frozenset({
    "pml", "btl", "btl_tcp_if_include", "btl_tcp_if_exclude", "oob_tcp_if_include",
    "oob_tcp_if_exclude", "plm_rsh_no_tree_spawn",
})
# Set from silent_node_timeout (when it is not 0).
_KEEPALIVE_MCA = ("oob_tcp_keepalive_time", "oob_tcp_keepalive_intvl", "oob_tcp_keepalive_probes")
KEEPALIVE_PROBES = 3


class PlanError(ValueError):
    """A plan that cannot be launched; the message names the problem and the fix."""


@dataclass(frozen=True)
class Node:
    name: str  # inventory name, used in messages
    address: str  # address on the cluster network; goes into the hostfile
    slots: int  # workers (GPUs) on this node
    interface: str | None = None  # NIC holding `address`; required when there are 2+ nodes


@dataclass(frozen=True, kw_only=True)
class Plan:
    nodes: tuple[Node, ...]  # in any order; the head is moved first
    head: str  # name of the head node (rank 0, rendezvous host)
    script: str  # training script path on the nodes
    run_id: str  # [A-Za-z0-9_.-]{1,64}; exported as TORCHFLEET_RUN_ID, used as --rdzv-id
    hostfile_path: str  # where the caller writes `Rendered.hostfile` on the head
    script_args: tuple[str, ...] = ()  # reach the script byte for byte
    mode: str = "torchrun"  # one of MODES
    port: int = DEFAULT_PORT  # rendezvous port / MASTER_PORT
    nproc_per_node: int | None = None  # torchrun/mpich: workers per node; default: the slots
    python: str = "python3"  # interpreter on the nodes (rank mode)
    torchrun: str = "torchrun"  # torchrun on the nodes (torchrun and mpich modes)
    launcher: str | None = None  # default: "mpirun", or "mpiexec" in mpich mode
    log_dir: str | None = None  # per-rank logs (Open MPI --output-filename)
    node_log_dir: str | None = None  # torchrun/mpich: each node's torchrun keeps worker logs here
    # torchrun's --tee: the workers' output also reaches the launcher's (where nothing else can
    # read the nodes' files: a batch job, PALS). Its copies can lose and glue lines, so a launch
    # whose head reads the files themselves leaves it off.
    tee_workers: bool = True
    tree_spawn: bool = False  # Open MPI: let daemons ssh on to further nodes (all need the key)
    network: str | None = None  # cluster CIDR; preferred over interface names for Open MPI
    env_pass: tuple[str, ...] = ()  # names forwarded from the launcher's environment
    env_secrets: tuple[str, ...] = ()  # as env_pass, but never displayed
    env_set: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    mpirun_extra_args: tuple[str, ...] = ()
    allow_run_as_root: bool = False  # Open MPI refuses root without it
    ssh_control_path: str | None = None  # Open MPI: ssh masters the caller opened to the nodes
    silent_node_timeout: int = 120  # Open MPI: seconds until a node off the network ends the run; 0: Open MPI's
    mpich_launcher: str | None = None  # mpich mode: which mpiexec, one of MPICH_LAUNCHERS


def plan_to_dict(plan: Plan) -> dict:
    """The plan as JSON holds it (the supervisor's run.json), for plan_from_dict."""
    data = {key.name: getattr(plan, key.name) for key in fields(plan)}
    data["nodes"] = [vars(node).copy() for node in plan.nodes]
    data["env_set"] = dict(plan.env_set)
    return {key: list(value) if isinstance(value, tuple) else value for key, value in data.items()}


def plan_from_dict(data: Mapping) -> Plan:
    """A plan from plan_to_dict's form: what a restart renders again, on other nodes."""
    values = dict(data)
    values["nodes"] = tuple(Node(**node) for node in values["nodes"])
    values["env_set"] = MappingProxyType(dict(values.get("env_set") or {}))
    for key in ("script_args", "env_pass", "env_secrets", "mpirun_extra_args"):
        values[key] = tuple(values.get(key) or ())
    return Plan(**values)


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

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    @property
    def display_env(self) -> dict[str, str]:
        shown = dict(self.env)
        shown.update(dict.fromkeys(self.inherit, INHERITED))
        shown.update(dict.fromkeys(self.secrets, REDACTED))
        return shown


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------

def _some(names, limit: int = 3) -> str:
    """'a, b, c and 7 more': keeps messages short on 10,000-node plans."""
    names = list(names)
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"


def _check_text(value, what: str, fix: str, dash_ok: bool = True) -> None:
    if not isinstance(value, str) or not value:
        raise PlanError(f"{what} must be a non-empty string, got {value!r}; {fix}")
    if "\0" in value:
        raise PlanError(f"{what} contains a NUL byte, which no command line can carry; {fix}")
    if not dash_ok and value.startswith("-"):
        raise PlanError(f"{what} {value!r} starts with '-' and would be read as an option; {fix}")


def _string_tuple(value, what: str) -> tuple[str, ...]:
    # A bare string is a sequence too: "PATH" would become five one-letter names.
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
        raise PlanError(f"{what} must be a list of strings, got {value!r}; wrap a single value "
                        f"in a list")
    for item in value:
        if not isinstance(item, str):
            raise PlanError(f"{what} must contain only strings, found {item!r}; quote it "
                            f"(e.g. in YAML write '{item}')")
        if "\0" in item:
            raise PlanError(f"{what} item {item!r} contains a NUL byte, which no command line "
                            f"can carry; remove it")
    return tuple(value)


def _check_env_name(name: str, what: str) -> None:
    if not _ENV_NAME.fullmatch(name):
        raise PlanError(f"{what}: {name!r} is not a valid environment variable name; use letters, "
                        f"digits and '_' only, not starting with a digit")
    if name in RESERVED_ENV:
        raise PlanError(f"{what}: {name} is set by torchfleet itself; remove it (interfaces come "
                        f"from the nodes, MASTER_* from the head, ranks from the launcher)")


def _check_nodes(plan: Plan) -> None:
    nodes = plan.nodes
    if isinstance(nodes, Node) or not isinstance(nodes, (tuple, list)):
        raise PlanError(f"nodes must be a list of Node, got {nodes!r}")
    if not nodes:
        raise PlanError("the plan has no nodes; add at least one host to the inventory group")
    names: set[str] = set()
    addresses: dict[str, str] = {}
    network = _check_network(plan.network)
    multi = len(nodes) > 1
    for node in nodes:
        if not isinstance(node, Node):
            raise PlanError(f"nodes must contain Node objects, found {node!r}")
        _check_text(node.name, "node name", "give every node its inventory name")
        if node.name in names:
            raise PlanError(f"node {node.name!r} is listed twice; list each host once")
        names.add(node.name)
        _check_address(node, network)
        if node.address in addresses:
            raise PlanError(f"nodes {addresses[node.address]!r} and {node.name!r} share the address "
                            f"{node.address}; each node needs its own address on the cluster "
                            f"network (check ansible_host)")
        addresses[node.address] = node.name
        if isinstance(node.slots, bool) or not isinstance(node.slots, int) or node.slots < 1:
            raise PlanError(f"node {node.name!r} has slots={node.slots!r}; slots is the number of "
                            f"workers (GPUs) on the node, an integer of at least 1")
        if node.interface is None:
            if multi:
                raise PlanError(f"node {node.name!r} has no cluster interface; with more than one "
                                f"node NCCL and Gloo need it: gather facts on every node or set "
                                f"the interface holding {node.address}")
        else:
            _check_interface(node)
    if plan.head not in names:
        raise PlanError(f"head {plan.head!r} is not one of the nodes ({_some(sorted(names))}); "
                        f"set head to one of them")


def _check_network(network):
    """Parse the CIDR once into (network, family, address bits, mask bits) for fast checks."""
    if network is None:
        return None
    try:
        net = ipaddress.ip_network(network, strict=False)
    except (TypeError, ValueError):
        raise PlanError(f"network {network!r} is not a CIDR such as 172.18.0.0/16; give the "
                        f"cluster network's CIDR or leave it unset") from None
    if net.is_loopback:
        raise PlanError(f"network {network} is the loopback network; give the cluster network's "
                        f"CIDR")
    family = socket.AF_INET if net.version == 4 else socket.AF_INET6
    return net, family, int(net.network_address), int(net.netmask)


def _packed_ip(address: str):
    """(family, bytes) for an IP literal, None for a DNS name. inet_pton is a pure conversion,
    several times faster than ipaddress, which matters on 10,000-node plans."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return family, socket.inet_pton(family, address)
        except OSError:
            pass
    return None


_LOOPBACK_V6 = bytes(15) + b"\1"


def _check_address(node: Node, network) -> None:
    address = node.address
    if not isinstance(address, str) or not _ADDRESS.fullmatch(address):
        raise PlanError(f"node {node.name!r} has address {address!r}; give its IP address or DNS "
                        f"name on the cluster network")
    if address.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        raise PlanError(f"node {node.name!r} has address {address}; other nodes cannot reach "
                        f"localhost: give its address on the cluster network")
    packed = _packed_ip(address)
    if packed is None:
        return  # a DNS name: nothing more to check without I/O
    family, raw = packed
    if (family == socket.AF_INET and raw[0] == 127) or raw == _LOOPBACK_V6 or not any(raw):
        raise PlanError(f"node {node.name!r} has address {address}, which other nodes cannot "
                        f"reach; give its address on the cluster network")
    if network is not None:
        net, net_family, net_bits, mask = network
        if family != net_family or int.from_bytes(raw, "big") & mask != net_bits:
            raise PlanError(f"node {node.name!r} address {address} is not on the cluster network "
                            f"{net}; use the node's address on that network (a docker0 address "
                            f"is a common mistake) or fix the network")


def _check_interface(node: Node) -> None:
    iface = node.interface
    if not isinstance(iface, str) or not _IFNAME.fullmatch(iface):
        raise PlanError(f"node {node.name!r} has interface {iface!r}, which is not an interface "
                        f"name; give the NIC's name as in `ip link`, e.g. eth0")
    if iface == "lo" or iface.startswith(_BAD_IF_PREFIXES):
        raise PlanError(f"node {node.name!r}: interface {iface} is loopback or a local bridge "
                        f"(lo, docker*, virbr*, br-*, veth*) and cannot carry cluster traffic; "
                        f"use the NIC that holds {node.address} on the cluster network")


def _check_workers(plan: Plan) -> None:
    if plan.mode == "rank":
        if plan.nproc_per_node is not None:
            raise PlanError("nproc_per_node applies to torchrun and mpich modes; in rank mode "
                            "each node runs its slots: leave nproc_per_node unset")
        return
    n = plan.nproc_per_node
    if n is None:
        by_slots: dict[int, list[str]] = {}
        for node in plan.nodes:
            by_slots.setdefault(node.slots, []).append(node.name)
        if len(by_slots) > 1:
            counts = "; ".join(f"{slots} on {_some(names)}" for slots, names in by_slots.items())
            raise PlanError(f"torchrun starts the same number of workers on every node, but slots "
                            f"differ ({counts}); fix the slots in the inventory, set "
                            f"nproc_per_node to a count every node has, or use mode 'rank'")
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise PlanError(f"nproc_per_node={n!r}; give an integer of at least 1, or leave it unset "
                        f"to use the nodes' slots")
    short = [node.name for node in plan.nodes if node.slots < n]
    if short:
        raise PlanError(f"nproc_per_node={n} but {_some(short)} have fewer slots; lower "
                        f"nproc_per_node or fix the slots in the inventory")


def _check_env(plan: Plan) -> None:
    seen: dict[str, str] = {}
    if not isinstance(plan.env_set, Mapping):
        raise PlanError(f"env_set must be a mapping of names to values, got {plan.env_set!r}")
    groups = (
        ("env_pass", _string_tuple(plan.env_pass, "env_pass")),
        ("env_secrets", _string_tuple(plan.env_secrets, "env_secrets")),
        ("env_set", tuple(plan.env_set)),
    )
    for group, names in groups:
        for name in names:
            if not isinstance(name, str):
                raise PlanError(f"{group}: names must be strings, found {name!r}")
            _check_env_name(name, group)
            other = seen.setdefault(name, group)
            if other != group:
                raise PlanError(f"{name} is in both {other} and {group}; list it in one place "
                                f"(env_secrets if its value must not be shown)")
    for name, value in plan.env_set.items():
        if not isinstance(value, str) or "\0" in value:
            raise PlanError(f"env_set: the value of {name} must be a string without NUL bytes, "
                            f"got {value!r}; quote it (in YAML: {name}: '{value}')")


def _check_extra_args(plan: Plan) -> None:
    args = _string_tuple(plan.mpirun_extra_args, "mpirun_extra_args")
    owned = _OWNED_MCA | ({"plm_rsh_args"} if plan.ssh_control_path else set())
    keepalive = set(_KEEPALIVE_MCA) if plan.silent_node_timeout and plan.mode != "mpich" else set()
    for i, arg in enumerate(args):
        if not arg:
            raise PlanError("mpirun_extra_args contains an empty string; remove it")
        option = arg.split("=", 1)[0]
        if option in _ENV_OPTIONS:
            raise PlanError(f"mpirun_extra_args: {arg!r} passes environment on the command line; "
                            f"use env_pass, env_set or env_secrets instead")
        if option in _OWNED_OPTIONS:
            raise PlanError(f"mpirun_extra_args: {arg!r} overrides an option torchfleet controls; "
                            f"remove it (torchfleet sets it from the plan)")
        name = args[i + 1] if option in _MCA_OPTIONS and i + 1 < len(args) else None
        if name in owned:
            raise PlanError(f"mpirun_extra_args: '{arg} {name}' overrides an MCA parameter "
                            f"torchfleet sets; remove it (interfaces come from network/nodes)")
        if name in keepalive:
            raise PlanError(f"mpirun_extra_args: '{arg} {name}' overrides the keepalive "
                            f"torchfleet sets from silent_node_timeout; remove it, and set "
                            f"silent_node_timeout instead (0 leaves Open MPI's keepalive as it is)")


def validate(plan: Plan) -> None:
    """Raise PlanError naming the first problem in `plan` and its fix."""
    if not isinstance(plan, Plan):
        raise PlanError(f"expected a Plan, got {type(plan).__name__}")
    if plan.mode not in MODES:
        raise PlanError(f"unknown mode {plan.mode!r}; use one of: {', '.join(MODES)}")
    _check_nodes(plan)
    _check_workers(plan)
    port = plan.port
    if isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= 65535:
        raise PlanError(f"port {port!r} is not usable for rendezvous; give an integer from 1024 "
                        f"to 65535 (default {DEFAULT_PORT})")
    if not isinstance(plan.run_id, str) or not RUN_ID.fullmatch(plan.run_id):
        raise PlanError(f"run_id {plan.run_id!r} is not valid; use 1 to 64 characters from "
                        f"letters, digits, '_', '.' and '-'")
    _check_text(plan.script, "script", "give the training script's path on the nodes",
                dash_ok=False)
    _string_tuple(plan.script_args, "script_args")
    _check_text(plan.python, "python", "give the interpreter path on the nodes")
    _check_text(plan.torchrun, "torchrun", "give torchrun's path on the nodes")
    _check_text(plan.hostfile_path, "hostfile_path", "give where the hostfile is written")
    if plan.launcher is not None:
        _check_text(plan.launcher, "launcher", "give the mpirun/mpiexec path or leave it unset")
    if plan.log_dir is not None:
        _check_text(plan.log_dir, "log_dir", "give a directory or leave it unset")
        if plan.mode == "mpich":
            raise PlanError("log_dir (per-rank log files) needs Open MPI's --output-filename; in "
                            "mpich mode leave log_dir unset and keep mpiexec's own output")
    if plan.node_log_dir is not None:
        _check_text(plan.node_log_dir, "node_log_dir", "give a directory or leave it unset")
        if plan.mode == "rank":
            raise PlanError("node_log_dir (torchrun's worker logs) applies to torchrun and mpich "
                            "modes; in rank mode use log_dir for per-rank logs")
    if plan.mode == "mpich" and plan.mpich_launcher not in MPICH_LAUNCHERS:
        raise PlanError(f"mpich mode needs to know which mpiexec it runs, got mpich_launcher="
                        f"{plan.mpich_launcher!r}; setup with mpi_implementation=mpich reads it from "
                        f"mpiexec --version, or set it: hydra (MPICH's Hydra, Intel MPI) or pals "
                        f"(HPE Cray PALS)")
    if plan.mpich_launcher is not None and plan.mode != "mpich":
        raise PlanError(f"mpich_launcher applies to mpich mode only; leave it unset in {plan.mode} mode")
    if plan.allow_run_as_root and plan.mode == "mpich":
        raise PlanError("allow_run_as_root is an Open MPI option; leave it unset in mpich mode")
    if plan.tree_spawn and plan.mode == "mpich":
        raise PlanError("tree_spawn is an Open MPI option; leave it unset in mpich mode")
    if plan.ssh_control_path is not None:
        _check_text(plan.ssh_control_path, "ssh_control_path", "give an OpenSSH ControlPath")
        if plan.mode == "mpich" or plan.tree_spawn:
            raise PlanError("ssh_control_path serves the head's own ssh to every node, which "
                            "mpich mode and tree_spawn do not use; leave it unset")
        if any(char.isspace() for char in plan.ssh_control_path):
            raise PlanError(f"ssh_control_path {plan.ssh_control_path!r} has white space, which "
                            f"Open MPI would split plm_rsh_args at; give a path without it")
    seconds = plan.silent_node_timeout
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
        raise PlanError(f"silent_node_timeout {seconds!r} is not a number of seconds; give 0 or "
                        f"more (0 leaves Open MPI's keepalive as it is)")
    _check_env(plan)
    _check_extra_args(plan)


# ---------------------------------------------------------------------------------------------
# Node slots, run ids and log layout (shared by the module, its filters and `torchfleet render`)
# ---------------------------------------------------------------------------------------------

def keepalive_mca(silent_node_timeout: int) -> list[str]:
    """Open MPI's TCP keepalive on its daemon connections, so that a peer gone silent for about
    `silent_node_timeout` seconds is given up: idle time, then KEEPALIVE_PROBES unanswered probes.
    Nothing for 0."""
    if not silent_node_timeout:
        return []
    interval = max(1, silent_node_timeout // (2 * KEEPALIVE_PROBES))
    idle = max(1, silent_node_timeout - KEEPALIVE_PROBES * interval)
    values = (idle, interval, KEEPALIVE_PROBES)
    return [item for name, value in zip(_KEEPALIVE_MCA, values) for item in ("--mca", name, str(value))]


def node_slots(gpu_count, nproc_per_node) -> int:
    """A node's workers: nproc_per_node, or with auto one per GPU and one on a node without GPUs."""
    if str(nproc_per_node) == "auto":
        return max(int(gpu_count or 0), 1)
    return int(nproc_per_node)


def new_run_id(now, token: str) -> str:
    """tf-YYYYMMDD-HHMMSS-TOKEN from a UTC time and a random token: sorts by start time, and the
    token keeps two launches in the same second apart."""
    return f"tf-{now:%Y%m%d-%H%M%S}-{token}"


def run_log_dirs(run_dir: str, mode: str) -> tuple[str | None, str | None]:
    """(per-rank files of Open MPI on each node, torchrun's per-worker logs on each node) under
    a run's directory; None where the mode has no such logs."""
    ranks = f"{run_dir}/ranks" if mode != "mpich" else None
    workers = f"{run_dir}/workers" if mode != "rank" else None
    return ranks, workers


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

def _launch_order(plan: Plan) -> list[Node]:
    # The launcher numbers nodes in hostfile order: the head first makes it node rank 0.
    head = next(node for node in plan.nodes if node.name == plan.head)
    return [head] + [node for node in plan.nodes if node is not head]


def _endpoint(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _torchrun_words(plan: Plan, nnodes: int, nproc: int, head: Node, node_rank: str) -> list[str]:
    q = shlex.quote
    words = ["exec", q(plan.torchrun)]
    if nnodes == 1:
        words += ["--standalone", "--nnodes=1"]
    else:
        words += [f"--nnodes={nnodes}", f'--node-rank="{node_rank}"']
    words.append(f"--nproc-per-node={nproc}")
    if nnodes > 1:
        # static, not c10d: c10d ignores --node-rank and orders nodes by FQDN, so the head
        # might not be node 0 and a global rank would not tell its node. MPI has fixed the node
        # ranks already; static keeps them, with the store on the head (node 0) at this endpoint.
        words += ["--rdzv-backend=static", q(f"--rdzv-endpoint={_endpoint(head.address, plan.port)}"),
                  q(f"--rdzv-id={plan.run_id}")]
    if plan.node_log_dir:
        # A directory per node (record.node_workers): a log_dir on storage every node shares
        # never mixes two nodes' files.
        words += [f'--log-dir={q(plan.node_log_dir)}/node"{node_rank if nnodes > 1 else 0}"', "--redirects=3"]
        if plan.tee_workers:
            words.append("--tee=3")
    return words + [q(plan.script), '"$@"']


# Gloo opens every interface listed in GLOO_SOCKET_IFNAME and fails on a node that lacks one,
# so with mixed names each node keeps the first listed interface it actually has.
# (NCCL treats its list as alternatives, so NCCL_SOCKET_IFNAME stays as is.)
_GLOO_PICK = ('IFS=,; for i in $GLOO_SOCKET_IFNAME; do if [ -e "/sys/class/net/$i" ]; then '
              'GLOO_SOCKET_IFNAME=$i; break; fi; done; unset IFS; ')


def _script(plan: Plan, nnodes: int, nproc: int, head: Node, mixed_ifaces: bool) -> str:
    # Only plan values go in here, each quoted; user arguments come in as "$@".
    prefix = _GLOO_PICK if mixed_ifaces else ""
    if plan.mode == "torchrun":
        rank = "${OMPI_COMM_WORLD_RANK:?not started by Open MPI mpirun}"
        return prefix + " ".join(_torchrun_words(plan, nnodes, nproc, head, rank))
    if plan.mode == "mpich":
        rank = "${PMI_RANK:-${PALS_RANKID:?not started by mpiexec}}"
        return prefix + " ".join(_torchrun_words(plan, nnodes, nproc, head, rank))
    # Fail loudly rather than start every process as rank "" when not under Open MPI.
    return (f'{prefix}: "${{OMPI_COMM_WORLD_RANK:?not started by Open MPI mpirun}}"; '
            'export RANK="$OMPI_COMM_WORLD_RANK" LOCAL_RANK="$OMPI_COMM_WORLD_LOCAL_RANK" '
            'WORLD_SIZE="$OMPI_COMM_WORLD_SIZE" LOCAL_WORLD_SIZE="$OMPI_COMM_WORLD_LOCAL_SIZE"; '
            f'exec {shlex.quote(plan.python)} {shlex.quote(plan.script)} "$@"')


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
    if plan.mode == "rank":
        env["MASTER_ADDR"] = head.address
        env["MASTER_PORT"] = str(plan.port)
    env.update(plan.env_set)
    inherit = tuple(dict.fromkeys(plan.env_pass))
    secrets = tuple(dict.fromkeys(plan.env_secrets))
    per_node_env = ({node.name: {"GLOO_SOCKET_IFNAME": node.interface} for node in order}
                    if mixed_ifaces else {})

    if plan.mode == "rank":
        world_size = sum(node.slots for node in order)
        nproc = 0  # unused: each rank is one worker
    else:
        nproc = plan.nproc_per_node or head.slots
        world_size = nproc * nnodes
    script = _script(plan, nnodes, nproc, head, mixed_ifaces)
    tail = [SHELL, "-c", script, SHELL_NAME, *plan.script_args]

    if plan.mode == "mpich" and plan.mpich_launcher == "hydra":
        hostfile = "".join(f"{node.address}\n" for node in order)
        argv = [plan.launcher or "mpiexec", "-launcher", "ssh", "-n", str(nnodes), "-ppn", "1",
                "-f", plan.hostfile_path, "-bind-to", "none", "-genvall"]
        if len(ifaces) == 1:
            argv += ["-iface", ifaces[0]]
        argv += ["-prepend-rank", *plan.mpirun_extra_args, *tail]
    elif plan.mode == "mpich":
        hostfile = "".join(f"{node.address}\n" for node in order)
        argv = [plan.launcher or "mpiexec", "-n", str(nnodes), "--ppn", "1", "--cpu-bind", "none",
                "--hostfile", plan.hostfile_path, "--envall", *plan.mpirun_extra_args, *tail]
    else:
        hostfile = "".join(f"{node.address} slots={node.slots}\n" for node in order)
        if plan.mode == "rank":
            argv = [plan.launcher or "mpirun", "-np", str(world_size), "--map-by", "slot"]
        else:
            argv = [plan.launcher or "mpirun", "-np", str(nnodes), "--map-by", "ppr:1:node"]
        argv += ["--bind-to", "none", "--hostfile", plan.hostfile_path,
                 "--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]
        if not plan.tree_spawn:
            argv += ["--mca", "plm_rsh_no_tree_spawn", "1"]
        if plan.ssh_control_path:
            argv += ["--mca", "plm_rsh_args", f"-o ControlPath={plan.ssh_control_path}"]
        argv += keepalive_mca(plan.silent_node_timeout)
        # A CIDR covers every node whatever its NIC is called; written normalized (host bits 0).
        if plan.network:
            if_include = str(ipaddress.ip_network(plan.network, strict=False))
        else:
            if_include = ",".join(ifaces)
        if if_include:
            argv += ["--mca", "btl_tcp_if_include", if_include,
                     "--mca", "oob_tcp_if_include", if_include]
        for name in (*env, *inherit, *secrets):
            argv += ["-x", name]
        if plan.log_dir:
            argv += ["--output-filename", plan.log_dir]
        # "[JOB,RANK]<stdout>:" on every line: which node (torchrun mode) or rank (rank mode)
        # wrote it, so the run's output can be followed per rank (_head.labels.shown).
        argv.append("--tag-output")
        if plan.allow_run_as_root:
            argv.append("--allow-run-as-root")
        argv += [*plan.mpirun_extra_args, *tail]

    return Rendered(argv=argv, hostfile=hostfile, env=env, inherit=inherit, secrets=secrets,
                    nodes=tuple(node.name for node in order), per_node_env=per_node_env,
                    world_size=world_size)
