"""What a node must pass to run a run's ranks: the checks a launch makes of every node before it
starts (the launch module's preflight), and the supervisor makes again of a node that comes back
before a run grows to it. Pure logic on a node's probe answer (probe.probe)."""

from __future__ import annotations

import base64
import hashlib
import ipaddress


def interface_change(node, interfaces) -> str | None:
    """How `node`'s cluster interface differs from what setup recorded (its interface holding its
    address), from the node's {interface: [IPv4 addresses]}; None where it is as recorded, or the
    node could not tell. A renamed NIC (a reboot, a driver update) would leave mpirun waiting for
    a daemon that cannot call back, and Gloo and NCCL binding an interface the node lacks."""
    if not node.interface or interfaces is None:
        return None
    try:
        ipv4 = ipaddress.ip_address(node.address).version == 4
    except ValueError:  # a name: only the interface can be checked
        ipv4 = False
    has = interfaces.get(node.interface)
    if has is not None and (not ipv4 or node.address in has):
        return None
    if has is None:
        now = f"has no interface {node.interface}"
    else:
        now = f"has {node.interface} with {', '.join(has) or 'no IPv4 address'}"
    holder = [name for name, addresses in interfaces.items() if ipv4 and node.address in addresses]
    if holder:
        now += f", and {node.address} on {holder[0]}"
    return f"{node.name}: setup recorded {node.interface} with {node.address}; the node now {now}"


def rejoin_request(checks: dict | None) -> dict:
    """The probe request that asks a node what the launch checked of it: the runs alive there,
    the script's files ({path: SHA-1}), its Python environment against setup's, its interfaces."""
    checks = checks or {}
    request = {"expect": checks.get("expect") or {}, "interfaces": True}
    if checks.get("packages"):
        request["packages"] = checks["packages"]
    return request


def rejoin_problem(node, answer: dict, run_id: str) -> str | None:
    """Why a node that came back may not rejoin run `run_id` (from its answer to rejoin_request):
    None where it passes every check the launch made of it."""
    if "error" in answer:
        return f"it does not take the head's ssh: {answer['error']}"
    others = sorted({proc["run_id"] for proc in answer.get("runs", []) if proc["run_id"] != run_id})
    if others:
        return f"another run is alive on it: {', '.join(others)}"
    if answer.get("drift"):
        return f"its Python environment is no longer what setup installed: {', '.join(answer['drift'])}"
    changed = interface_change(node, answer.get("interfaces"))
    if changed:
        return f"its cluster interface changed: {changed}"
    return None


def head_copies(stale: list, expect: dict) -> tuple[dict, list]:
    """({path: base64 content} of the run's files a node lacks, read from the head's own copies
    (the launch put the same files at the same paths on every node), [paths the head's copy of
    which is not what the launch sent any more])."""
    found, changed = {}, []
    for path in stale:
        try:
            with open(path, "rb") as handle:
                content = handle.read()
        except OSError:
            content = None
        if content is None or hashlib.sha1(content).hexdigest() != expect.get(path):
            changed.append(path)
        else:
            found[path] = base64.b64encode(content).decode()
    return found, changed
