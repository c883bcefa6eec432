# Copyright: torchfleet contributors
"""The doctor_pick filter: the few keys of a registered result that the report needs."""

from __future__ import annotations


DOCUMENTATION = r"""
name: doctor_pick
short_description: The few keys of a registered result that the doctor's report needs
version_added: 1.0.0
description:
  - Keeps the facts each node leaves for the report small, with only the keys asked for that the
    result has.
options:
  _input:
    description: A registered result (or nothing, for a task that was skipped).
    type: dict
    required: true
  keys:
    description: The keys to keep.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Keep what the report reads of the probe
  ansible.builtin.set_fact:
    _doctor_raw:
      probe: "{{ _probe | torchfleet.cluster.doctor_pick(['rc', 'stdout', 'stderr']) }}"
"""

RETURN = r"""
_value:
  description: The registered result's keys that were asked for.
  type: dict
"""


# Imported when the filter runs, not with this file: to find one filter of the collection,
# Ansible loads every filter file, in each task's worker, and compiles what they import.
def doctor_pick(*args, **kwargs):
    from ansible_collections.torchfleet.cluster.plugins.plugin_utils._doctor import pick as pick_

    return pick_(*args, **kwargs)


class FilterModule:
    def filters(self):
        return {"doctor_pick": doctor_pick}
