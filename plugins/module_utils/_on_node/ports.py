"""The rendezvous port on this node: whether it is free as the store would bind it, and who holds
it. The launch checks it on the head, the doctor too (node_probe), so both judge a port alike."""

from __future__ import annotations

import errno
import os
import socket

from .processes import cmdline, read_bytes


def listening_inodes(proc_net_tcp: str, port: int) -> set[int]:
    """Socket inodes bound to `port` (listening or bound, not connections) in the text of
    /proc/net/tcp or /proc/net/tcp6."""
    inodes = set()
    for line in proc_net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or ":" not in fields[1]:
            continue
        # 0A is LISTEN, 07 a bound socket not (yet) listening; both block the port.
        if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] in ("0A", "07"):
            inode = int(fields[9])
            if inode:
                inodes.add(inode)
    return inodes


def port_in_use(port: int) -> bool:
    """Try to bind the port as the rendezvous store will (any address, IPv4 and IPv6)."""
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this node
        with sock:
            # SO_REUSEADDR: a previous run's connections in TIME_WAIT do not block the store.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((address, port))
            except OSError as err:
                if err.errno == errno.EADDRINUSE:
                    return True
    return False


def port_holders(port: int) -> list[str]:
    """'pid 123 (python3 -m http.server)' for the processes we can see holding the port."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            inodes |= listening_inodes(read_bytes(table).decode(), port)
        except OSError:
            pass
    wanted = {f"socket:[{inode}]" for inode in inodes}
    holders = []
    for entry in os.listdir("/proc") if wanted else ():
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
            if any(os.readlink(f"/proc/{entry}/fd/{fd}") in wanted for fd in fds):
                holders.append(f"pid {entry} ({cmdline(entry, 120)})")
        except OSError:
            continue
    return holders
