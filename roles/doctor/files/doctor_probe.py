# The doctor's read-only probe of one node. Argument: a JSON object with
#   "port": a TCP port to test on this node (or null),
#   "connect": [{"key": K, "interface": IFACE, "source": ADDRESS, "target": ADDRESS, "port": P}],
#   "timeout": seconds per connect.
# Prints a JSON object: "interfaces" {name: IPv4 address}, "connect" {K: {"ok", "error"}},
# "port" {"in_use", "holders"}. Changes nothing on the node.
import errno
import json
import os
import socket
import subprocess
import sys
import threading


def interfaces():
    found = {}
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True,
                             check=False).stdout
    except OSError:
        return found
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet":
            name = fields[1].split("@")[0]
            found.setdefault(name, fields[3].split("/")[0])
    return found


def connect(probe, own, timeout, results):
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


def port_in_use(port):
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((address, port))
            except OSError as err:
                if err.errno == errno.EADDRINUSE:
                    return True
    return False


def port_holders(port):
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            # local address is ADDR:PORT in hex; state 0A is LISTEN
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{cols[9]}]")
    holders = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()) if inodes else ():
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{pid}/fd")):
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    cmd = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
                holders.append(f"pid {pid} ({cmd[:120]})")
        except OSError:
            continue
    return holders


def main():
    request = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    own = interfaces()
    results = {}
    threads = [threading.Thread(target=connect, args=(probe, set(own.values()), float(request.get("timeout", 3)), results))
               for probe in request.get("connect", [])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    report = {"interfaces": own, "connect": results, "port": None}
    if request.get("port"):
        busy = port_in_use(int(request["port"]))
        report["port"] = {"in_use": busy, "holders": port_holders(int(request["port"])) if busy else []}
    print(json.dumps(report))


main()
