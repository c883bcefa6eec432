"""Filter `torchfleet.cluster.inventory_problems`: what is wrong with the cluster's inventory."""

from __future__ import annotations

DOCUMENTATION = r"""
name: inventory_problems
short_description: What is wrong with the cluster group of an inventory, each problem with its fix
version_added: 1.0.0
description:
  - Checks, on the controller and before anything on a node changes, that the group has hosts,
    that the head node is one of them, and that no machine is listed under two names.
  - Returns one message per problem; an empty list means the inventory is good.
  - One filter call instead of one assert task per concern, because each task costs a playbook
    time even when it passes.
options:
  _input:
    description: The group's hosts, in inventory order.
    type: list
    elements: str
    required: true
  group:
    description: The group's name, for the messages.
    type: str
    required: true
  head:
    description: The head node's inventory name.
    type: str
    required: true
  addresses:
    description: Each host's ansible_host, in the same order as the hosts; empty for a host reached by its name.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Check the inventory
  vars:
    _problems: >-
      {{ groups['cluster'] | torchfleet.cluster.inventory_problems('cluster', groups['cluster'][0],
         groups['cluster'] | map('extract', hostvars) | map(attribute='ansible_host', default='') | list) }}
  ansible.builtin.fail:
    msg: "{{ _problems | join(' ') }}"
  when: _problems | length > 0
"""

RETURN = r"""
_value:
  description: One message per problem; empty when there is none.
  type: list
  elements: str
"""


def inventory_problems(hosts, group, head, addresses) -> list[str]:
    if not hosts:
        # The other checks read the hosts: this problem is said alone.
        return [f"The inventory has no hosts in group '{group}'. List your nodes under '{group}:' in an "
                f"inventory (copy inventory/hosts.yml.example to inventory/hosts.yml; README, \"Describe "
                f"your cluster\") and pass it with -i, name the group that holds them with -e "
                f"torchfleet_group=NAME, or start the local cluster with `torchfleet cluster up`."]
    problems = []
    if head not in hosts:
        problems.append(f"torchfleet_head is '{head}', which is not in group '{group}' ({', '.join(hosts)}). "
                        f"Set torchfleet_head to one of those hosts.")
    by_address: dict[str, list[str]] = {}
    for host, address in zip(hosts, addresses):
        by_address.setdefault(str(address or host), []).append(host)
    twice = "; ".join(f"{' and '.join(names)} are both {address}"
                      for address, names in by_address.items() if len(names) > 1)
    if twice:
        problems.append(f"A machine is listed more than once in group '{group}': {twice}; keep one name "
                        f"per machine.")
    return problems


class FilterModule:
    def filters(self):
        return {"inventory_problems": inventory_problems}
