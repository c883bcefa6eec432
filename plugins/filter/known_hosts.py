# Copyright: torchfleet contributors
"""The known_hosts filter: the lines that let every node check every other node's host key."""

from __future__ import annotations

DOCUMENTATION = r"""
name: known_hosts
short_description: The cluster's known_hosts lines, from the host keys Ansible gathered
version_added: 1.0.0
description:
  - One line per node and host key type (ed25519, ecdsa, rsa), naming the node by every name and
    address mpirun or a user may use for it (the inventory name, its hostname and FQDN, its
    cluster address, C(ansible_host)), with the key from the node's own facts, never from a scan.
  - The C(ssh_trust) role writes these lines into every node's known_hosts; the C(doctor) role
    compares them with what the nodes hold.
options:
  _input:
    description:
      - Each node's variables (C(hostvars)), in inventory order; C(ansible_facts) must hold the
        host keys (C(ssh_host_key_*_public)), as gathering facts leaves them.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Let every node check every other node's host key
  ansible.builtin.blockinfile:
    path: /etc/ssh/ssh_known_hosts
    block: "{{ groups['cluster'] | map('extract', hostvars) | torchfleet.cluster.known_hosts | join('\n') }}"
"""

RETURN = r"""
_value:
  description: The known_hosts lines.
  type: list
  elements: str
"""

KEY_TYPES = ("ed25519", "ecdsa", "rsa")


def known_hosts(nodes) -> list[str]:
    lines = []
    for node in nodes:
        facts = node.get("ansible_facts") or {}
        names = [node.get("inventory_hostname"), facts.get("hostname"), facts.get("fqdn"),
                 (node.get("preflight_net") or {}).get("address"), node.get("ansible_host")]
        names = list(dict.fromkeys(str(name) for name in names if name))
        for key_type in KEY_TYPES:
            key = facts.get(f"ssh_host_key_{key_type}_public")
            if key:
                lines.append(f"{','.join(names)} {facts[f'ssh_host_key_{key_type}_public_keytype']} {key}")
    return lines


class FilterModule:
    def filters(self):
        return {"known_hosts": known_hosts}
