# Copyright: torchfleet contributors
"""The doctor_probe_plan filter: what one node probes of the others."""

from __future__ import annotations


DOCUMENTATION = r"""
name: doctor_probe_plan
short_description: What one node probes of the others (interfaces, the head's port)
version_added: 1.0.0
description:
  - The TCP connects one node makes to port 22, bound to its own address, on every interface all
    nodes have to every other node, and on its cluster interface to the head's cluster address.
options:
  _input:
    description: Node name to that node's interfaces (interface name to IPv4 address).
    type: dict
    required: true
  me:
    description: The node that probes.
    type: str
    required: true
  head:
    description: The head node.
    type: str
    required: true
  cluster_interface:
    description: The interface setup chose for the cluster, when known.
    type: str
    default: ""
  head_address:
    description: The head's address on it, when known.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Plan this node's probes
  ansible.builtin.set_fact:
    _plan: "{{ _maps | torchfleet.cluster.doctor_probe_plan(inventory_hostname, doctor_head) }}"
"""

RETURN = r"""
_value:
  description: One C(key), C(interface), C(source), C(target) and C(port) per connect.
  type: list
  elements: dict
"""


# Imported when the filter runs, not with this file: to find one filter of the collection,
# Ansible loads every filter file, in each task's worker, and compiles what they import.
def doctor_probe_plan(*args, **kwargs):
    from ansible_collections.torchfleet.cluster.plugins.plugin_utils._doctor import probe_plan as probe_plan_

    return probe_plan_(*args, **kwargs)


class FilterModule:
    def filters(self):
        return {"doctor_probe_plan": doctor_probe_plan}
