# Copyright: torchfleet contributors
"""The doctor's judgement: what each node reported, turned into one result per check and node, and
the plans of its probes. The doctor_* filters call these; each filter has a file of its own, so
that ansible-doc shows each one's own documentation."""

from __future__ import annotations

import re

from ansible_collections.torchfleet.cluster.plugins.plugin_utils._host_differences import host_differences
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import DEFAULT_PORT


HOST_KEY_MARKERS = ("Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED",
                    "host key is known", "Host key for", "No matching host key")
AUTH_MARKERS = ("Permission denied", "Too many authentication failures")
LOOPBACK = ("lo",)


def result(check, host, ok, reason, fix="", level=None):
    return {"check": check, "host": host, "ok": bool(ok),
            "level": level or ("pass" if ok else "fail"), "reason": reason, "fix": fix}


def pick(registered, keys):
    """The few keys of a registered result the report needs (keeps the fact small)."""
    registered = registered or {}
    return {key: registered[key] for key in keys if key in registered}


def common_interfaces(names_per_node):
    """Interface names every node has (with an IPv4 address), loopback left out, sorted."""
    names = [set(names) for names in names_per_node]
    if not names:
        return []
    return sorted(set.intersection(*names) - set(LOOPBACK))


def ssh_targets(nets, me):
    """Every other node by its cluster address and by its inventory name: [{peer, target}]."""
    targets: list[dict] = []
    for peer, net in nets.items():
        if peer == me:
            continue
        address = (net or {}).get("address") or ""
        targets.extend({"peer": peer, "target": target} for target in ([address] if address else []) + [peer])
    return targets


def probe_plan(maps, me, head, cluster_interface="", head_address=""):
    """The TCP connects node `me` makes: on every common interface to every other node, and on its
    cluster interface to the head's cluster address."""
    mine = maps.get(me, {})
    probes: list[dict] = []
    for iface in common_interfaces(names.keys() for names in maps.values()):
        probes.extend({"key": f"{iface}|{peer}", "interface": iface, "source": mine[iface],
                       "target": maps[peer][iface], "port": 22} for peer in maps if peer != me)
    if cluster_interface in mine and head_address and me != head:
        probes.append({"key": "(head)", "interface": cluster_interface, "source": mine[cluster_interface],
                       "target": head_address, "port": 22})
    return probes


def analyse_interfaces(addresses, reachable, cluster_interfaces=()):
    """Which interfaces common to all nodes can carry traffic between them.

    addresses: {node: {interface: IPv4 address}}; reachable: {interface: {source node: {target
    node: True/False or an error text}}}, the TCP connects from each node bound to its address on
    that interface to the other node's address on it. Returns, per common interface, a dict with
    `interface`, `usable`, `reason`, `addresses` ({node: address}) and `cluster` (whether a node
    uses it as its cluster interface).
    """
    nodes = list(addresses)
    found = []
    for iface in common_interfaces(addresses[node].keys() for node in nodes):
        by_node = {node: addresses[node][iface] for node in nodes}
        holders: dict = {}
        for node, address in by_node.items():
            holders.setdefault(address, []).append(node)
        shared = {address: owners for address, owners in holders.items() if len(owners) > 1}
        failures = []
        for source in nodes:
            for target in nodes:
                if source == target:
                    continue
                outcome = reachable.get(iface, {}).get(source, {}).get(target)
                if outcome is True:
                    continue
                why = outcome if isinstance(outcome, str) and outcome else "no answer"
                failures.append(f"{source} cannot reach {target} ({by_node[target]}): {why}")
        if len(nodes) < 2:
            usable, reason = True, f"{iface}: only one node"
        elif shared:
            usable = False
            if len(holders) == 1:
                reason = (f"{iface} has the same address {next(iter(holders))} on every node: "
                          f"no node can reach another through it")
            else:
                reason = f"{iface} has the same address on several nodes: " + "; ".join(
                    f"{address} on {', '.join(owners)}" for address, owners in sorted(shared.items()))
        elif failures:
            usable = False
            reason = f"{iface} does not connect every pair of nodes: " + "; ".join(failures)
        else:
            usable = True
            reason = f"{iface} connects every pair of nodes (" + ", ".join(
                f"{node} {address}" for node, address in by_node.items()) + ")"
        found.append({"interface": iface, "usable": usable, "reason": reason, "addresses": by_node,
                      "cluster": iface in set(cluster_interfaces)})
    return found


def _error(registered):
    registered = registered or {}
    text = (registered.get("stderr") or registered.get("msg") or "").strip()
    return text.splitlines()[-1] if text else f"exit code {registered.get('rc')}"


def _ran(registered):
    """False when the command could not even be executed (not installed)."""
    registered = registered or {}
    return not (registered.get("rc") is None or (registered.get("rc") != 0 and
                registered.get("msg", "").startswith(("Error executing command", "[Errno 2]"))))


def ssh_problem(stderr):
    text = stderr or ""
    if any(marker in text for marker in HOST_KEY_MARKERS):
        return "host key"
    if any(marker in text for marker in AUTH_MARKERS):
        return "authentication"
    return "connection"


def known_hosts_block(content, block):
    """The lines of the managed block `# BEGIN <block>...` .. `# END <block>...` of a known_hosts file."""
    lines, inside = [], False
    for line in (content or "").splitlines():
        if line.startswith(f"# BEGIN {block}"):
            inside = True
        elif line.startswith(f"# END {block}"):
            inside = False
        elif inside and line.strip():
            lines.append(line.strip())
    return lines


def _known_hosts_problems(host, raw, expected, block):
    if not expected:
        return []  # no host keys cached on the controller: nothing to compare with
    present = set(known_hosts_block(raw.get("known_hosts"), block))
    problems = []
    for line in expected:
        if line.strip() not in present:
            fields = line.split()
            problems.append(f"known_hosts on {host} lacks the {fields[1] if len(fields) > 1 else '?'} key of "
                            f"{fields[0].split(',')[0]}")
    extra = len(present - {line.strip() for line in expected})
    if extra:
        problems.append(f"known_hosts on {host} has {extra} line(s) in the torchfleet block that setup did not write")
    return problems


def _ssh_results(host, raw, expected_known_hosts=(), block="torchfleet cluster"):
    failures = []
    for problem in _known_hosts_problems(host, raw, expected_known_hosts, block):
        failures.append((None, None, "known_hosts", problem))
    for attempt in raw.get("ssh", []):
        if attempt.get("rc") == 0:
            continue
        # A node without the cluster's private key is refused by design: the host key was checked.
        if not raw.get("launch_node", True) and ssh_problem(attempt.get("stderr")) == "authentication":
            continue
        item = attempt.get("item", {})
        stderr = (attempt.get("stderr") or attempt.get("msg") or "").strip()
        kind = ssh_problem(stderr)
        last = stderr.splitlines()[-1] if stderr else f"exit code {attempt.get('rc')}"
        failures.append((item.get("peer", "?"), item.get("target", "?"), kind, last))
    if not raw.get("ssh") and not failures:
        return [result("ssh", host, True, "no other node to reach")]
    if not failures:
        targets = sorted({a.get("item", {}).get("target", "") for a in raw["ssh"]})
        how = ("logs in to" if raw.get("launch_node", True)
               else "checks the host keys and reaches the sshd of")
        return [result("ssh", host, True, f"{how} {', '.join(targets)} as the training account")]
    parts, fixes = [], []
    for peer, target, kind, last in failures:
        if kind == "known_hosts":
            parts.append(f"host key problem: {last}")
            fixes.append(f"run setup.yml again: it rewrites the known_hosts block on {host}")
        elif kind == "host key":
            parts.append(f"{host} -> {peer} as {target}: host key problem, known_hosts ({last})")
            fixes.append(f"run setup.yml again: it rewrites the known_hosts block on {host}")
        elif kind == "authentication":
            parts.append(f"{host} -> {peer} as {target}: key refused ({last})")
            fixes.append(f"run setup.yml again: it authorizes the cluster key on {peer}")
        else:
            parts.append(f"{host} -> {peer} as {target}: connection problem, sshd down or unreachable ({last})")
            fixes.append(f"check that {peer} is up and its sshd runs and listens, and the network between "
                         f"{host} and {peer}")
    return [result("ssh", host, False, "; ".join(parts), "; ".join(dict.fromkeys(fixes)))]


def _versions(raw):
    """{name: version} read now on the node, and a list of what could not be read."""
    found, errors = {}, []
    mpirun = raw.get("mpirun", {})
    text = mpirun.get("stdout") or ""
    # Open MPI's mpirun, or on a cluster set up with MPICH alone its mpiexec (Hydra, PALS).
    openmpi = re.search(r"(?:Open MPI|OpenRTE)\)? ([0-9][0-9.a-z]*)", text)
    mpich = re.search(r"[Vv]ersion:?\s+([0-9][0-9.a-z]*)", text)
    if mpirun.get("rc") == 0 and openmpi:
        found["Open MPI"] = openmpi.group(1)
    elif mpirun.get("rc") == 0 and mpich:
        found["MPICH"] = mpich.group(1)
    else:
        errors.append(f"mpirun --version failed ({_error(mpirun)})")
    env = raw.get("env", {})
    locks = raw.get("locks", [])
    if len(locks) != 1:
        errors.append(f"{len(locks)} requirements.lock found where setup pushes the wheels (1 expected)")
    elif env.get("failed") or "fingerprint" not in env:
        errors.append(f"the Python environment could not be read ({env.get('msg', 'unknown error')})")
    else:
        found["Python"] = env.get("python_version", "")
        for name, version in sorted((env.get("packages") or {}).items()):
            found[name] = version
        found["environment fingerprint"] = env.get("fingerprint", "")[:12]
    nccl = raw.get("nccl") or {}
    if nccl.get("version"):
        found["NCCL"] = nccl["version"]
    else:
        errors.append(f"NCCL could not be loaded ({nccl.get('msg') or 'no answer'})")
    return found, errors


def _version_results(raws, head):
    reached = [host for host, raw in raws.items() if raw.get("reachable")]
    order = ([head] if head in reached else []) + [host for host in reached if host != head]
    versions, errors = {}, {}
    for host in order:
        versions[host], errors[host] = _versions(raws[host])
    differences = {}
    for sentence in host_differences({host: versions[host] for host in order}):
        differences[sentence.split(" differs from ", 1)[0]] = sentence
    out = []
    for host in order:
        drift = (raws[host].get("env") or {}).get("drift") or []
        problems = list(errors[host])
        if host in differences:
            problems.append(differences[host])
        if drift:
            problems.append("against the lock setup pushed: " + "; ".join(drift))
        if problems:
            out.append(result("versions", host, False, " ".join(problems),
                              f"run setup.yml again: it puts every node back to the same MPI, "
                              f"Python environment and NCCL (the odd node: {host})"))
        else:
            summary = ", ".join(f"{name} {versions[host][name]}" for name in
                                ("Open MPI", "MPICH", "Python", "torch", "NCCL", "environment fingerprint")
                                if name in versions[host])
            same = "the same as the head" if host != head else "the reference"
            out.append(result("versions", host, True, f"{summary}: {same}"))
    return out


def _gpu_results(raws, head):
    counts: dict[str, tuple[int | None, str | None]] = {}
    out = []
    for host, raw in raws.items():
        if not raw.get("reachable"):
            continue
        gpus = raw.get("gpus", {})
        if not _ran(gpus):
            counts[host] = (0, None)
        elif gpus.get("rc") == 0:
            counts[host] = (len([line for line in (gpus.get("stdout") or "").splitlines() if line.strip()]), None)
        else:
            counts[host] = (None, f"nvidia-smi failed ({_error(gpus)})")
    reference = counts.get(head, (None, None))[0]
    for host, (count, error) in counts.items():
        raw = raws[host]
        apps = raw.get("gpu_apps", {})
        busy = [line.strip() for line in (apps.get("stdout") or "").splitlines()
                if line.strip()] if apps.get("rc") == 0 else []
        if error:
            out.append(result("gpus", host, False, error, "check the NVIDIA driver on the node (nvidia-smi)"))
        elif reference is not None and count != reference:
            out.append(result("gpus", host, False, f"{count} GPUs, the head {head} has {reference}",
                              f"every node must show the same GPUs: check {host}'s driver and hardware"))
        elif busy:
            out.append(result("gpus", host, False, f"{count} GPUs, busy with process(es) {', '.join(busy)}",
                              f"end those processes on {host} (nvidia-smi lists them) before a run"))
        else:
            out.append(result("gpus", host, True, f"{count} GPUs, none busy" if count else
                              "no nvidia-smi: 0 GPUs (CPU only)"))
    return out


def _network_results(raws, head, probes):
    head_net = (raws.get(head) or {}).get("cluster_net") or {}
    out = []
    for host, raw in raws.items():
        if not raw.get("reachable"):
            continue
        net = raw.get("cluster_net") or {}
        iface, address = net.get("interface"), net.get("address")
        mine = (probes.get(host) or {}).get("interfaces", {})
        if not iface:
            out.append(result("network", host, False, "no cluster interface recorded for this node",
                              "run setup.yml: preflight finds and caches the cluster interface"))
        elif iface not in mine:
            out.append(result("network", host, False, f"the cluster interface {iface} is gone or has no IPv4 address",
                              f"bring {iface} up on {host} with its address {address}, or run setup.yml again "
                              f"to pick the cluster interface afresh"))
        elif host == head:
            out.append(result("network", host, True, f"{iface} {mine[iface]} (the head)"))
        else:
            probe = ((probes.get(host) or {}).get("connect") or {}).get("(head)")
            if probe and probe.get("ok"):
                out.append(result("network", host, True,
                                  f"{iface} {mine[iface]} reaches the head {head} at {head_net.get('address')}"))
            else:
                why = (probe or {}).get("error") or "not probed"
                out.append(result("network", host, False,
                                  f"{iface} {mine[iface]} does not reach the head {head} at "
                                  f"{head_net.get('address')} (TCP 22: {why})",
                                  f"check the cluster network between {host} and {head} (link, routes, firewall)"))
    return out


def _interface_results(raws, probes):
    reached = [host for host in raws if raws[host].get("reachable") and host in probes]
    addresses = {host: probes[host].get("interfaces", {}) for host in reached}
    reachable: dict = {}
    for host in reached:
        for key, outcome in (probes[host].get("connect") or {}).items():
            if "|" not in key:
                continue
            iface, target = key.split("|", 1)
            reachable.setdefault(iface, {}).setdefault(host, {})[target] = (
                True if outcome.get("ok") else outcome.get("error") or "no answer")
    cluster = {(raws[host].get("cluster_net") or {}).get("interface") for host in reached}
    out = []
    for found in analyse_interfaces(addresses, reachable, cluster - {None}):
        if found["usable"]:
            out.append(result("interfaces", "all", True, found["reason"], level="info"))
        elif found["cluster"]:
            out.append(result("interfaces", "all", False, found["reason"] + ": it is the cluster interface",
                              "set preflight_network to the CIDR of a network every node reaches, and run "
                              "setup.yml again"))
        else:
            out.append(result("interfaces", "all", True, found["reason"] + ": unusable, and not used",
                              "nothing to do: torchfleet never routes NCCL, Gloo or Open MPI through it",
                              level="info"))
    return out


def _port_results(raws, head, port, probes):
    if not (raws.get(head) or {}).get("reachable"):
        return []
    found = (probes.get(head) or {}).get("port")
    if not found:
        return [result("port", head, False, f"could not test port {port} ({_error(raws[head].get('probe'))})",
                       "check that python3 runs on the head")]
    if found.get("in_use"):
        holders = found.get("holders") or []
        return [result("port", head, False,
                       f"the rendezvous port {port} is taken on the head" +
                       (f" by {', '.join(holders)}" if holders else ""),
                       "stop what holds it (a run left over? `torchfleet stop` or `ansible-playbook launch.yml "
                       "-e launch_action=stop`), or choose another port with -e master_port=N")]
    return [result("port", head, True, f"the rendezvous port {port} is free")]


def _run_results(raws):
    out = []
    for host, raw in raws.items():
        if not raw.get("reachable"):
            continue
        runs = raw.get("runs") or {}
        if runs.get("failed"):
            out.append(result("runs", host, False, f"could not look for runs ({runs.get('msg', '')})",
                              "check the node's /proc and python3"))
        elif runs.get("runs"):
            described = "; ".join(f"run {run['run_id']} (pids {', '.join(str(pid) for pid in run['pids'])})"
                                  for run in runs["runs"])
            out.append(result("runs", host, False, f"left alive from an earlier run: {described}",
                              "end them with `ansible-playbook launch.yml -e launch_action=stop` (or `torchfleet stop`)"))
        else:
            out.append(result("runs", host, True, "no process of a run of torchfleet"))
    return out


def _torchft_results(raws):
    """Where torchft was asked for (doctor_torchft): whether it imports in the environment, and its
    Lighthouse is beside the interpreter. Nodes where it was not asked get no result."""
    out = []
    for host, raw in raws.items():
        found = raw.get("torchft") or {}
        if not raw.get("reachable") or not found or found.get("skipped"):
            continue
        if found.get("rc") == 0:
            version = (found.get("stdout") or "").strip()
            out.append(result("torchft", host, True, f"torchft {version} imports in the environment, "
                                                     f"torchft_lighthouse beside it"))
        else:
            out.append(result("torchft", host, False,
                              f"torchft does not import in the Python environment ({_error(found)})",
                              f"run setup.yml -e fault_tolerance=torchft (or name torchft in "
                              f"python_env_packages): it puts torchft in the environment of every node, "
                              f"{host} included"))
    return out


def doctor_results(raws, head, master_port=DEFAULT_PORT, unreachable=None, known_hosts=(),
                   known_hosts_block="torchfleet cluster"):
    if not isinstance(raws, dict):
        raise TypeError("doctor_results expects a mapping of node names to findings")
    raws = {host: dict(raw or {}) for host, raw in raws.items()}
    unreachable = unreachable or {}
    probes = {}
    for host, raw in raws.items():
        # The node_probe module's results: the full probe, else the first read of the interfaces.
        found = next((got for got in (raw.get("probe"), raw.get("ifaces")) if got and "interfaces" in got), None)
        if raw.get("reachable") and found is not None:
            probes[host] = found
    results = []
    for host, raw in raws.items():
        if raw.get("reachable"):
            results.extend(_ssh_results(host, raw, known_hosts, known_hosts_block))
        else:
            message = (unreachable.get(host) or "").strip()
            results.append(result("ssh", host, False, "unreachable from the controller" +
                                  (f" ({message.splitlines()[-1]})" if message else ""),
                                  f"check that {host} is up and its sshd runs, and that the inventory's "
                                  f"address for it is right"))
    results.extend(_version_results(raws, head))
    results.extend(_gpu_results(raws, head))
    results.extend(_network_results(raws, head, probes))
    results.extend(_interface_results(raws, probes))
    results.extend(_port_results(raws, head, master_port, probes))
    results.extend(_run_results(raws))
    results.extend(_torchft_results(raws))
    return results


def doctor_line(entry):
    text = f"[{entry['level'].upper()}] {entry['check']} {entry['host']}: {entry['reason']}"
    return text + (f" -> {entry['fix']}" if entry.get("fix") and not entry["ok"] else "")
