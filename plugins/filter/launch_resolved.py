"""Filter `torchfleet.cluster.launch_resolved`: the launch's arguments from setup's facts of the head."""

from __future__ import annotations


DOCUMENTATION = r"""
name: launch_resolved
short_description: The torchrun_launch arguments that come from setup's facts of the head
version_added: 1.0.0
description:
  - Resolves, from the facts setup.yml recorded for the head and the options the user chose, the
    module's O(script) and O(chdir) on the nodes, O(python), O(torchrun), O(launcher),
    O(mpich_launcher), O(allow_run_as_root), O(check_nodes) and O(expect_packages).
  - The same function gives C(torchfleet render) its values, so a dry run shows what the launch runs.
options:
  _input:
    description: The head's hostvars (setup's facts).
    type: dict
    required: true
  mode:
    description: torchrun, rank or mpich.
    type: str
    required: true
  user:
    description: The training account.
    type: str
    required: true
  script:
    description: The script's path on the controller (or on shared storage).
    type: str
    required: true
  shared_storage:
    description: Whether the script is at the same path on every node already.
    type: raw
    required: true
  script_dir:
    description: Where the launch copies scripts on the nodes.
    type: str
    required: true
  mpich_launcher:
    description: hydra or pals; empty for what setup read from mpiexec.
    type: str
"""

EXAMPLES = r"""
- name: Resolve the launch's arguments from the head's facts
  ansible.builtin.set_fact:
    resolved: >-
      {{ hostvars[launch_head] | torchfleet.cluster.launch_resolved(mode='torchrun', user='torchfleet',
         script='train.py', shared_storage=false, script_dir='~/torchfleet/scripts') }}
"""

RETURN = r"""
_value:
  description: The module's arguments by name (None where the facts lack one).
  type: dict
"""


# Imported when the filter runs, not with this file (see launch_nodes.py).
def launch_resolved(*args, **kwargs):
    from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_resolution import resolved

    return resolved(*args, **kwargs)


class FilterModule:
    def filters(self):
        return {"launch_resolved": launch_resolved}
