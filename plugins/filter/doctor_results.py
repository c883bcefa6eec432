# Copyright: torchfleet contributors
"""The doctor_results filter: the findings of every node judged, one result per check and node."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


DOCUMENTATION = r"""
name: doctor_results
short_description: Judge the findings of the doctor playbook, one result per check and node
version_added: 1.0.0
description:
  - Takes, per node, the raw findings of the C(doctor) role (C(_doctor_raw)) and returns a list of
    results, each with C(check), C(host), C(ok), C(level) (C(pass), C(fail) or C(info)), C(reason)
    and C(fix).
  - M(torchfleet.cluster.doctor_line) turns one result into a line of text.
options:
  _input:
    description: Node name to the node's C(_doctor_raw), in inventory order.
    type: dict
    required: true
  head:
    description: The head node; versions and GPU counts are compared with it.
    type: str
    required: true
  master_port:
    description: The rendezvous port; default the launch's (C(launch_master_port)).
    type: int
  unreachable:
    description: Node name to the controller's message for the nodes it could not reach.
    type: dict
  known_hosts:
    description: The lines setup wrote into the managed known_hosts block of every node.
    type: list
    elements: str
  known_hosts_block:
    description: The name in the block's markers (C(torchfleet CLUSTER_NAME)).
    type: str
    default: torchfleet cluster
"""

EXAMPLES = r"""
- name: Judge the findings
  ansible.builtin.set_fact:
    doctor_results: "{{ _raw | torchfleet.cluster.doctor_results(head='node0', master_port=doctor_master_port) }}"
"""

RETURN = r"""
_value:
  description: One result per check and node.
  type: list
  elements: dict
"""


# Imported when the filter runs, not with this file: to find one filter of the collection,
# Ansible loads every filter file, in each task's worker, and compiles what they import.
def doctor_results(raws, *args, **kwargs):
    from ansible_collections.torchfleet.cluster.plugins.plugin_utils import _doctor

    # The options and their defaults are _doctor.doctor_results's, documented above.
    try:
        return _doctor.doctor_results(raws, *args, **kwargs)
    except TypeError as err:
        raise AnsibleFilterError(str(err)) from err


class FilterModule:
    def filters(self):
        return {"doctor_results": doctor_results}
