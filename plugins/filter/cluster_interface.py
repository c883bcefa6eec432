"""Filter `torchfleet.cluster.cluster_interface`: the interface a node uses on the cluster network."""

from __future__ import annotations

import fnmatch
import ipaddress

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: cluster_interface
short_description: Pick the cluster network interface of a node from its gathered facts
version_added: 1.0.0
description:
  - Returns the interface, address and network a node uses to reach the other nodes.
  - With O(network), the interface with an IPv4 address in that network; else the interface that
    holds the node's inventory address; else the interface of its default IPv4 route.
  - Interfaces that match O(excluded) are never picked. A docker0 with the same address on every
    node is exactly what hangs NCCL.
options:
  _input:
    description: The node's gathered facts (C(ansible_facts)).
    type: dict
    required: true
  inventory_address:
    description: The node's inventory address (C(ansible_host)); ignored when it is not an IP address.
    type: str
    default: ""
  network:
    description: The cluster network as a CIDR, for nodes with several networks.
    type: str
    default: ""
  excluded:
    description: Interface name patterns that are never picked.
    type: list
    elements: str
    default: [lo, docker0, "virbr*", "br-*", "veth*"]
"""

EXAMPLES = r"""
- name: Find the cluster interface
  ansible.builtin.set_fact:
    node_net: "{{ ansible_facts | torchfleet.cluster.cluster_interface(inventory_address=ansible_host) }}"
"""

RETURN = r"""
_value:
  description: The picked interface.
  type: dict
  contains:
    interface: {description: Interface name, type: str}
    address: {description: IPv4 address on it, type: str}
    network: {description: Its network as a CIDR, type: str}
"""

DEFAULT_EXCLUDED = ("lo", "docker0", "virbr*", "br-*", "veth*")


def _ipv4_interfaces(facts: dict, excluded) -> list[tuple[str, ipaddress.IPv4Interface]]:
    found = []
    for name in facts.get("interfaces", []):
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in excluded):
            continue
        data = facts.get(name.replace("-", "_").replace(".", "_"), {})
        for entry in [data.get("ipv4")] + list(data.get("ipv4_secondaries", [])):
            if entry and entry.get("address"):
                found.append((name, ipaddress.IPv4Interface(f"{entry['address']}/{entry['netmask']}")))
    return found


def pick_cluster_interface(facts: dict, inventory_address: str = "", network: str = "",
                           excluded=DEFAULT_EXCLUDED) -> dict:
    if "interfaces" not in facts:
        # Not "no usable interface": Ansible read none at all. Its Linux network facts come from
        # the `ip` command, which minimal images (many containers) lack.
        raise AnsibleFilterError(
            "Ansible gathered no network facts on this node (no interfaces at all), so the cluster "
            "interface cannot be chosen: install iproute2 (the `ip` command, which Ansible's network "
            "facts read) on the node, or gather the 'network' subset if gather_subset leaves it out, "
            "then run setup again.")
    candidates = _ipv4_interfaces(facts, excluded)
    listing = ", ".join(f"{name} {iface}" for name, iface in candidates) or "none"
    if network:
        try:
            wanted = ipaddress.IPv4Network(network, strict=False)
        except ValueError as error:
            raise AnsibleFilterError(f"cluster network {network!r} is not an IPv4 CIDR ({error}); "
                                     "write it as for example 10.10.10.0/24") from error
        chosen = [(n, i) for n, i in candidates if i.ip in wanted]
        if not chosen:
            raise AnsibleFilterError(f"no usable interface is on the cluster network {network}; "
                                     f"this node has: {listing}. Fix preflight_network or the node's network.")
    else:
        chosen = [(n, i) for n, i in candidates if str(i.ip) == inventory_address]
        if not chosen:
            default = facts.get("default_ipv4", {}).get("interface")
            chosen = [(n, i) for n, i in candidates if n == default]
        if not chosen:
            raise AnsibleFilterError(
                "cannot tell which interface carries cluster traffic: the inventory address "
                f"{inventory_address or '(none)'} is not on a usable interface and the default route's "
                f"interface is excluded or missing; usable interfaces: {listing}. Set preflight_network "
                "to the cluster network's CIDR.")
    name, iface = chosen[0]
    return {"interface": name, "address": str(iface.ip), "network": str(iface.network)}


class FilterModule:
    def filters(self):
        return {"cluster_interface": pick_cluster_interface}
