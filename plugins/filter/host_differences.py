"""Filter `torchfleet.cluster.host_differences`: what differs between nodes that must be identical."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


DOCUMENTATION = r"""
name: host_differences
short_description: Name the nodes, and the values, that differ from the first node
version_added: 1.0.0
description:
  - Takes, per node, a mapping of names to values (installed packages to versions, or
    C(nccl) to a version) and returns one sentence per node that differs from the first node,
    naming each name whose value differs, is missing or is extra.
  - An empty list means every node holds the same values.
options:
  _input:
    description: Node name to a mapping of names to values, in inventory order (the first is the reference).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Fail when the environments differ
  ansible.builtin.assert:
    that: _differences | length == 0
    fail_msg: "{{ _differences | join(' ') }}"
  vars:
    _differences: >-
      {{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'python_env_packages')))
         | torchfleet.cluster.host_differences }}
"""

RETURN = r"""
_value:
  description: One sentence per node that differs from the first node.
  type: list
  elements: str
"""


# Imported when the filter runs, not with this file: to find one filter of the collection,
# Ansible loads every filter file, in each task's worker, and compiles what they import.
def host_differences(values_by_host):
    from ansible_collections.torchfleet.cluster.plugins.plugin_utils import _host_differences

    try:
        return _host_differences.host_differences(values_by_host)
    except TypeError as err:
        raise AnsibleFilterError(str(err)) from err


class FilterModule:
    def filters(self):
        return {"host_differences": host_differences}
