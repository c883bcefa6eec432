"""What the controller sends into a local cluster and what its nodes receive, counted by the
kernel: the figures of the wheelhouse tests and benchmarks."""

from __future__ import annotations

import os

from torchfleet.devcluster.cluster import network
from torchfleet.devcluster.engine import ClusterError, docker, run


class ControllerTraffic:
    """Bytes this machine (the controller) sends into cluster `name`'s network, counted by an
    iptables rule in OUTPUT with no target (it counts and lets every packet on), so traffic
    between the nodes, which never leaves the bridge through this machine's own stack, and
    traffic routed for the nodes to the outside (apt), which goes through FORWARD, are not
    counted. Needs root and iptables; a context manager that removes its rule."""

    def __init__(self, name: str):
        named = network(name)
        subnets = docker("network", "inspect", "--format", "{{range .IPAM.Config}}{{.Subnet}} {{end}}",
                         named).stdout.split()
        ipv4 = [subnet for subnet in subnets if ":" not in subnet]
        if not ipv4:
            raise ClusterError(f"network {named} has no IPv4 subnet ({' '.join(subnets) or 'none'}) to count "
                               f"the controller's traffic on: recreate the cluster with `torchfleet cluster down --name {name}` "
                               f"and `torchfleet cluster up --name {name}`")
        self.spec = ["OUTPUT", "-d", ipv4[0],
                     "-m", "comment", "--comment", f"torchfleet-traffic-{name}-{os.getpid()}"]

    def __enter__(self) -> "ControllerTraffic":
        run(["iptables", "-I", *self.spec])
        return self

    def __exit__(self, *exc) -> None:
        run(["iptables", "-D", *self.spec], check=False)

    def sent(self) -> int:
        """Bytes sent since the rule was made (or last zeroed)."""
        listing = run(["iptables", "-L", "OUTPUT", "-v", "-x", "-n"]).stdout
        comment = self.spec[-1]
        return sum(int(line.split()[1]) for line in listing.splitlines() if f"/* {comment} */" in line)


def received_bytes(containers: list[str]) -> dict[str, int]:
    """Bytes each node's eth0 has received since it started (the kernel's counter)."""
    return {c: int(docker("exec", c, "cat", "/sys/class/net/eth0/statistics/rx_bytes").stdout) for c in containers}
