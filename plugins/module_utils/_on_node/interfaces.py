"""This node's network interfaces and their IPv4 addresses, and TCP connects from each to the other
nodes (the doctor's reachability matrix)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading


def interface_addresses() -> dict | None:
    """{interface name: [its IPv4 addresses]}, from `ip -4 -o addr show`; an interface without
    one is listed from /sys/class/net with []. None where `ip` cannot be run."""
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True,
                             check=False).stdout
    except OSError:
        return None
    try:
        found: dict[str, list[str]] = {name: [] for name in sorted(os.listdir("/sys/class/net"))}
    except OSError:
        found = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet":
            found.setdefault(fields[1].split("@")[0], []).append(fields[3].split("/")[0])
    return found


def ipv4_interfaces() -> dict:
    """{interface name: its first IPv4 address} ({} without ip)."""
    return {name: addresses[0] for name, addresses in (interface_addresses() or {}).items() if addresses}


def _connect(probe: dict, own: set, timeout: float, results: dict) -> None:
    key = probe["key"]
    if probe["target"] in own:
        results[key] = {"ok": False, "error": "the target address is this node's own"}
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        if probe.get("interface") and os.geteuid() == 0:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, probe["interface"].encode())
            except OSError:
                pass  # the bound source address still picks the interface
        sock.bind((probe["source"], 0))
        sock.connect((probe["target"], int(probe.get("port", 22))))
        results[key] = {"ok": True, "error": ""}
    except OSError as err:
        results[key] = {"ok": False, "error": err.strerror or str(err)}
    finally:
        sock.close()


def connect_all(probes: list, own_addresses, timeout: float) -> dict:
    """{key: {ok, error}}: a TCP connect for each probe ({key, interface, source, target, port}),
    bound to its source address (and interface, as root), all at once."""
    results: dict = {}
    threads = [threading.Thread(target=_connect, args=(probe, set(own_addresses), timeout, results))
               for probe in probes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
