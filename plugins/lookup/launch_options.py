# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Lookup `torchfleet.cluster.launch_options`: what the launch option table declares, for plays."""

from __future__ import annotations

DOCUMENTATION = r"""
name: launch_options
author:
  - torchfleet developers (@torchfleet)
short_description: What the launch option table declares, for the playbooks and roles
version_added: 1.0.0
description:
  - Reads the one table that declares the launch options
    (C(plugins/module_utils/_launch_options.py)), so that another role (the doctor's) takes a
    launch option's default from it instead of writing it again.
options:
  _terms:
    description:
      - V(defaults) gives each launch option's default, by the option's name.
    type: list
    elements: str
    required: true
    choices: [defaults]
"""

EXAMPLES = r"""
- name: The launch's default rendezvous port
  ansible.builtin.debug:
    msg: "{{ lookup('torchfleet.cluster.launch_options', 'defaults').master_port }}"
"""

RETURN = r"""
_raw:
  description: One mapping per term, as the term names.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_options import OPTIONS


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        unknown = [str(term) for term in terms if term != "defaults"]
        if unknown:
            raise AnsibleError(f"launch_options knows defaults, not {', '.join(unknown)}")
        return [{option.name: option.default for option in OPTIONS} for _term in terms]
