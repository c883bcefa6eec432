# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A launch plan's checks (``validate``): each names the problem and the fix, and renderer.py runs
them before it renders anything."""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Mapping

from .launch_plan import FAULT_TOLERANCE, MODES, RESERVED_ENV, RUN_ID, Node, Plan, PlanError, port_problem
from .launchers import KEEPALIVE_MCA, choice_problem, launcher_of

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_IFNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")  # Linux: at most 15 characters
_ADDRESS = re.compile(r"[A-Za-z0-9:][A-Za-z0-9._:-]{0,252}")  # DNS name or IP literal
# Interfaces that exist on a node but never carry cluster traffic (docker0 and the like: NCCL and Gloo hang on them).
_BAD_IF_PREFIXES = ("docker", "virbr", "br-", "veth")


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
    network = _check_network(plan.request.network)
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
    if plan.request.head not in names:
        raise PlanError(f"head {plan.request.head!r} is not one of the nodes ({_some(sorted(names))}); "
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
    cheaper than ipaddress, and a plan checks every node's address."""
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
    if plan.request.mode == "rank":
        if plan.request.nproc_per_node is not None:
            raise PlanError("nproc_per_node applies to torchrun and mpich modes; in rank mode "
                            "each node runs its slots: leave nproc_per_node unset")
        return
    n = plan.request.nproc_per_node
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
    args = _string_tuple(plan.request.mpirun_extra_args, "mpirun_extra_args")
    owned = _OWNED_MCA | ({"plm_rsh_args"} if plan.ssh_control_path else set())
    keepalive = set(KEEPALIVE_MCA) if plan.request.silent_node_timeout and launcher_of(plan.request).keepalive else set()
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


# torchrun's options that torchfleet sets (both spellings, and torchrun's --name=value form).
_TORCHRUN_OWNED = {"--" + name for stem in ("nnodes", "node-rank", "nproc-per-node", "rdzv-backend", "rdzv-endpoint",
                                            "rdzv-id", "rdzv-conf", "standalone", "log-dir", "redirects", "tee",
                                            "max-restarts", "master-addr", "master-port", "no-python", "module")
                   for name in (stem, stem.replace("-", "_"))} | {"-r", "-t", "-m"}


def torchrun_args_problem(args, mode: str) -> str | None:
    """What is wrong with torchrun_extra_args (a list of strings) in `mode`; None when nothing is.
    The controller's check (_launch_checks) and the plan's call it: one rule."""
    if args and mode == "rank":
        return "torchrun_extra_args: rank mode runs no torchrun (one MPI rank per worker); remove them, or use mode torchrun"
    for arg in args:
        if not arg or "\0" in arg:
            return f"torchrun_extra_args: {arg!r} is empty or holds a NUL byte; remove it"
        if arg.split("=", 1)[0] in _TORCHRUN_OWNED:
            return (f"torchrun_extra_args: {arg!r} overrides an option torchfleet sets; remove it (nodes, workers "
                    f"and rendezvous come from the plan, logs from log_dir, restarts from max_restarts)")
    return None


def _check_torchrun_args(plan: Plan) -> None:
    said = torchrun_args_problem(_string_tuple(plan.request.torchrun_extra_args, "torchrun_extra_args"), plan.request.mode)
    if said:
        raise PlanError(said)


def _check_fault_tolerance(plan: Plan) -> None:
    request = plan.request
    if request.fault_tolerance not in FAULT_TOLERANCE:
        raise PlanError(f"fault_tolerance is {request.fault_tolerance!r}: give none (a lost node restarts the run) "
                        f"or torchft (the other nodes train on; the script uses torchft)")
    if request.fault_tolerance != "torchft":
        return
    beat = request.torchft_heartbeat_ms
    if isinstance(beat, bool) or not isinstance(beat, int) or beat < 100:
        raise PlanError(f"torchft_heartbeat_ms is {beat!r}: give the Lighthouse's heartbeat timeout in "
                        f"milliseconds, 100 or more (default 1000)")
    why = None
    if request.scheduler != "none":
        why = (f"scheduler={request.scheduler} starts the run as one job; torchft needs one torchrun a node "
               f"that the supervisor starts and restarts over ssh: use scheduler=none")
    elif request.mode != "torchrun":
        why = f"mode {request.mode} runs no torchrun a node from the head: use mode torchrun"
    elif len(plan.nodes) < 2:
        why = "the run has one node, and a replica group needs another to heal from: give two nodes or more"
    elif request.expect_packages and not any(name.lower().replace("_", "-") == "torchft"
                                             for name in request.expect_packages):
        why = (f"setup installed no torchft in the Python environment on {request.head}: run "
               f"`ansible-playbook setup.yml -i INVENTORY -e fault_tolerance=torchft` first")
    if why:
        raise PlanError(f"fault_tolerance=torchft: {why}, or launch with fault_tolerance=none.")


def validate(plan: Plan) -> None:
    """Raise PlanError naming the first problem in `plan` and its fix."""
    if not isinstance(plan, Plan):
        raise PlanError(f"expected a Plan, got {type(plan).__name__}")
    if plan.request.mode not in MODES:
        raise PlanError(f"unknown mode {plan.request.mode!r}; use one of: {', '.join(MODES)}")
    _check_nodes(plan)
    _check_workers(plan)
    port = plan.request.master_port
    said = port_problem(port) if isinstance(port, int) else f"master_port is {port!r}: give it as an integer."
    if said:
        raise PlanError(said)
    if not isinstance(plan.run_id, str) or not RUN_ID.fullmatch(plan.run_id):
        raise PlanError(f"run_id {plan.run_id!r} is not valid; use 1 to 64 characters from "
                        f"letters, digits, '_', '.' and '-', the first a letter or digit, no '..'")
    _check_text(plan.request.script, "script", "give the training script's path on the nodes",
                dash_ok=False)
    _string_tuple(plan.request.script_args, "script_args")
    _check_text(plan.request.python, "python", "give the interpreter path on the nodes")
    _check_text(plan.request.torchrun, "torchrun", "give torchrun's path on the nodes")
    _check_text(plan.hostfile_path, "hostfile_path", "give where the hostfile is written")
    if plan.request.launcher is not None:
        _check_text(plan.request.launcher, "launcher", "give the mpirun/mpiexec path or leave it unset")
    if plan.log_dir is not None:
        _check_text(plan.log_dir, "log_dir", "give a directory or leave it unset")
    if plan.node_log_dir is not None:
        _check_text(plan.node_log_dir, "node_log_dir", "give a directory or leave it unset")
        if plan.request.mode == "rank":
            raise PlanError("node_log_dir (torchrun's worker logs) applies to torchrun and mpich "
                            "modes; in rank mode use log_dir for per-rank logs")
    if plan.ssh_control_path is not None:
        _check_text(plan.ssh_control_path, "ssh_control_path", "give an OpenSSH ControlPath")
        if any(char.isspace() for char in plan.ssh_control_path):
            raise PlanError(f"ssh_control_path {plan.ssh_control_path!r} has white space, which "
                            f"Open MPI would split plm_rsh_args at; give a path without it")
    said = choice_problem(plan.request.mode, plan.request.mpich_launcher) or launcher_of(plan.request).problem(plan)
    if said:
        raise PlanError(said)
    _check_fault_tolerance(plan)
    seconds = plan.request.silent_node_timeout
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
        raise PlanError(f"silent_node_timeout {seconds!r} is not a number of seconds; give 0 or "
                        f"more (0 leaves Open MPI's keepalive as it is)")
    _check_env(plan)
    _check_extra_args(plan)
    _check_torchrun_args(plan)


# ---------------------------------------------------------------------------------------------
# Node slots, run ids and log layout (shared by the module, its filters and `torchfleet render`)
