"""Filter `torchfleet.cluster.file_sha1`: the SHA-1 of a file on the controller."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.torchfleet.cluster.plugins.module_utils._files import file_sha1

DOCUMENTATION = r"""
name: file_sha1
short_description: The SHA-1 of a file on the controller
version_added: 1.0.0
description:
  - Reads the file in blocks (text or binary) and returns its SHA-1 as hex, the digest Ansible's
    copy and stat use. The launch sends it to the nodes with the render, and copies only the files
    whose copy on a node differs.
options:
  _input:
    description: The file's path on the controller.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Tell the nodes what the script should be
  ansible.builtin.debug:
    msg: "{{ 'train.py' | torchfleet.cluster.file_sha1 }}"
"""

RETURN = r"""
_value:
  description: The SHA-1, 40 hex digits.
  type: str
"""


def sha1_on_controller(path: str) -> str:
    found = file_sha1(path)
    if found is None:
        raise AnsibleFilterError(f"file_sha1: cannot read {path} on the controller")
    return found


class FilterModule:
    def filters(self):
        return {"file_sha1": sha1_on_controller}
