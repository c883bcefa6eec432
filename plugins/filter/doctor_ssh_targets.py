# Copyright: torchfleet contributors
"""The doctor_ssh_targets filter: the names and addresses a node must reach the others by over SSH."""

from __future__ import annotations


DOCUMENTATION = r"""
name: doctor_ssh_targets
short_description: The names and addresses a node must reach the others by over SSH
version_added: 1.0.0
description:
  - Every other node by its cluster address and by its inventory name, which the doctor logs in to
    over SSH as the training account, as mpirun would.
options:
  _input:
    description: Node name to that node's cluster network fact (C(preflight_net), with C(address)).
    type: dict
    required: true
  me:
    description: The node asking; it is left out.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The other nodes, by every name and address
  ansible.builtin.set_fact:
    _targets: "{{ _nets | torchfleet.cluster.doctor_ssh_targets(inventory_hostname) }}"
"""

RETURN = r"""
_value:
  description: One C(peer) (the node) and C(target) (its address or name) per login to try.
  type: list
  elements: dict
"""


# Imported when the filter runs, not with this file: to find one filter of the collection,
# Ansible loads every filter file, in each task's worker, and compiles what they import.
def doctor_ssh_targets(*args, **kwargs):
    from ansible_collections.torchfleet.cluster.plugins.plugin_utils._doctor import ssh_targets as ssh_targets_

    return ssh_targets_(*args, **kwargs)


class FilterModule:
    def filters(self):
        return {"doctor_ssh_targets": doctor_ssh_targets}
