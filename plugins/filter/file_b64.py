"""Filter `torchfleet.cluster.file_b64`: a file on the controller, base64-encoded."""

from __future__ import annotations

import base64

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: file_b64
short_description: A file on the controller, base64-encoded, byte for byte
version_added: 1.0.0
description:
  - Reads the file as bytes (text or binary; unlike the C(file) lookup, no trailing newline is
    stripped) and returns its content base64-encoded. The launch hands the script and its files
    to the module on the head this way, which puts them on the nodes that lack them.
options:
  _input:
    description: The file's path on the controller, relative to the current directory.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Hand the script to the launch module
  ansible.builtin.debug:
    msg: "{{ 'train.py' | torchfleet.cluster.file_b64 }}"
"""

RETURN = r"""
_value:
  description: The file's content, base64.
  type: str
"""


def file_b64(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return base64.b64encode(handle.read()).decode("ascii")
    except OSError as err:
        raise AnsibleFilterError(f"file_b64: cannot read {path} on the controller: {err.strerror}") from err


class FilterModule:
    def filters(self):
        return {"file_b64": file_b64}
