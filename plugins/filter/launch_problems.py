"""Filter `torchfleet.cluster.launch_problems`: what is wrong with a launch request, as messages."""

from __future__ import annotations


DOCUMENTATION = r"""
name: launch_problems
short_description: What is wrong with a launch request, each problem with its fix
version_added: 1.0.0
description:
  - Checks a launch request on the controller, before anything on a node changes, and returns one
    message per problem, each naming the variable, its value and how to fix it. An empty list
    means the request is good.
  - One filter call instead of one assert task per concern, because each task costs the launch
    time even when it passes.
  - Reads the controller's files (the script and its files) and environment (the secrets).
options:
  _input:
    description:
      - The request as the launch role's validate.yml gathers it. C(variables) holds the launch
        role's variables of the options the checks read, as given (the list
        C(tools/write_launch_options.py) writes from the option table's C(CHECKED_OPTIONS)).
        Beside them, what only the play knows - each node's hostvars under C(nodes)
        (read once, as each read of hostvars costs the controller time per node), C(group_hosts)
        and C(play_hosts), what setup recorded on the head (C(head_torchrun), C(head_mpiexec),
        C(head_mpirun), C(head_found_launcher)), C(reserved_action) (what -e action= gave; refused, as Ansible reserves
        the name), and C(facts_pending) (setup's facts are to be read back from the nodes, and
        the checks that need them wait for that). The checks are
        C(plugins/module_utils/_launch_checks.py)'s C(problems()).
    type: dict
    required: true
"""

EXAMPLES = r"""
# fail + when: the filter runs once when the request is good (an assert's fail_msg is templated,
# and so the filter run again, even when the assertion holds).
- name: Check the launch request
  vars:
    _problems: "{{ _launch_request | torchfleet.cluster.launch_problems }}"
  ansible.builtin.fail:
    msg: "{{ _problems | join(' ') }}"
  when: _problems | length > 0
"""

RETURN = r"""
_value:
  description: One message per problem, in the order the checks run; empty when there is none.
  type: list
  elements: str
"""


# Imported when the filter runs, not with this file: to find one filter of the collection,
# Ansible loads every filter file, in each task's worker, and compiles what they import.
def launch_problems(request: dict) -> list[str]:
    from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_checks import problems

    return problems(request)


class FilterModule:
    def filters(self):
        return {"launch_problems": launch_problems}
