# Copyright: torchfleet contributors
"""The doctor_line filter: one result as a line of text."""

from __future__ import annotations


DOCUMENTATION = r"""
name: doctor_line
short_description: One result of the doctor as a line of text
version_added: 1.0.0
description:
  - "C([LEVEL] check host: reason), followed by C(-> fix) for a check that failed."
options:
  _input:
    description: One result of the doctor_results filter.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Say every result
  ansible.builtin.debug:
    msg: "{{ doctor_results | map('torchfleet.cluster.doctor_line') | list }}"
"""

RETURN = r"""
_value:
  description: The line.
  type: str
"""


# Imported when the filter runs, not with this file: to find one filter of the collection,
# Ansible loads every filter file, in each task's worker, and compiles what they import.
def doctor_line(*args, **kwargs):
    from ansible_collections.torchfleet.cluster.plugins.plugin_utils._doctor import doctor_line as doctor_line_

    return doctor_line_(*args, **kwargs)


class FilterModule:
    def filters(self):
        return {"doctor_line": doctor_line}
