# Copyright: torchfleet contributors
"""How each node's values (versions, packages) differ from the first node's, in words."""

from __future__ import annotations


def host_differences(values_by_host):
    """One sentence per node whose values differ from the first node's, naming each difference."""
    if not isinstance(values_by_host, dict):
        raise TypeError("host_differences expects a mapping of node names to mappings")
    hosts = list(values_by_host)
    if not hosts:
        return []
    first = hosts[0]
    reference = values_by_host[first] or {}
    sentences = []
    for host in hosts[1:]:
        values = values_by_host[host] or {}
        parts = []
        for name in sorted(set(reference) | set(values)):
            if name not in values:
                parts.append(f"{name} missing ({first} has {reference[name]})")
            elif name not in reference:
                parts.append(f"{name} {values[name]} extra ({first} has none)")
            elif str(values[name]) != str(reference[name]):
                parts.append(f"{name} {values[name]} ({first} has {reference[name]})")
        if parts:
            sentences.append(f"{host} differs from {first}: " + ", ".join(parts) + ".")
    return sentences
