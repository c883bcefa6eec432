# The doctor's read-only probe of one node. First argument: a JSON object with
#   "port": a TCP port to test on this node (or null),
#   "connect": [{"key": K, "interface": IFACE, "source": ADDRESS, "target": ADDRESS, "port": P}],
#   "timeout": seconds per connect.
# Second argument, needed with "port": the text of the launch's node probe
# (plugins/module_utils/_node_probe.py), whose port check this one runs, so that the doctor and
# the launch judge the rendezvous port alike (this file runs alone on the node: nothing to import).
# Prints a JSON object: "interfaces" {name: IPv4 address}, "connect" {K: {"ok", "error"}},
# "port" {"in_use", "holders"}. Changes nothing on the node.
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


def port_report(port, node_probe_source):
    node_probe = {"__name__": "_node_probe"}  # not "__main__": its own main() stays unrun
    exec(compile(node_probe_source, "_node_probe.py", "exec"), node_probe)
    busy = node_probe["port_in_use"](port)
    return {"in_use": busy, "holders": node_probe["port_holders"](port) if busy else []}


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
        report["port"] = port_report(int(request["port"]), sys.argv[2])
    print(json.dumps(report))


main()
