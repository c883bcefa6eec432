"""Filter `torchfleet.cluster.launch_nodes`: the nodes of a run, from the facts setup cached."""

from __future__ import annotations


DOCUMENTATION = r"""
name: launch_nodes
short_description: The nodes of a run, as the torchrun_launch module takes them
version_added: 1.0.0
description:
  - Turns each node's variables (the facts setup.yml cached) into the module's node entry
    (name, address, interface, slots), in the order given.
  - With nproc_per_node auto, a node's slots are its GPU count, and 1 on a node without GPUs.
options:
  _input:
    description: Each node's hostvars, in the group's order.
    type: list
    elements: dict
    required: true
  nproc_per_node:
    description: auto, or the number of workers on every node.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Describe the run's nodes
  ansible.builtin.set_fact:
    nodes: "{{ groups['cluster'] | map('extract', hostvars) | torchfleet.cluster.launch_nodes('auto') }}"
"""

RETURN = r"""
_value:
  description: One dict per node with name, address, interface and slots.
  type: list
  elements: dict
"""


# Imported when the filter runs, not with this file: to find one filter of the collection,
# Ansible loads every filter file, in each task's worker, and compiles what they import.
def launch_nodes(*args, **kwargs):
    from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_resolution import launch_nodes as launch_nodes_

    return launch_nodes_(*args, **kwargs)


class FilterModule:
    def filters(self):
        return {"launch_nodes": launch_nodes}
