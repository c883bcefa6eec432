"""Filter `torchfleet.cluster.spread_tree`: which node each node fetches the wheels from."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


DOCUMENTATION = r"""
name: spread_tree
short_description: The tree the wheels spread along, from the seed node to the others
version_added: 1.0.0
description:
  - Takes the nodes that lack wheels and returns, for each, its parent, the node it fetches
    from, in a tree rooted at O(seed) with O(fanout) children per node, filled level by level in
    the order given. The seed alone gets the wheels from the controller, and every parent
    serves its children while its own parent still serves it, so the controller's traffic does
    not grow with the node count and the time grows with the tree's depth, the logarithm of it.
options:
  _input:
    description: The nodes that lack wheels, in play order. The seed, when listed, is left out.
    type: list
    elements: str
    required: true
  seed:
    description: The node that gets the wheels from the controller.
    type: str
    required: true
  fanout:
    description: Children per node.
    type: int
    default: 2
"""

EXAMPLES = r"""
- name: Each node's parent
  ansible.builtin.debug:
    msg: "{{ ['node1', 'node2', 'node3'] | torchfleet.cluster.spread_tree('node0') }}"
  # {"node1": "node0", "node2": "node0", "node3": "node1"}
"""

RETURN = r"""
_value:
  description: Node name to the name of the node it fetches from.
  type: dict
"""


# Imported when the filter runs, not with this file: to find one filter of the collection,
# Ansible loads every filter file, in each task's worker, and compiles what they import.
def spread_tree(receivers, seed, fanout=2):
    from ansible_collections.torchfleet.cluster.plugins.module_utils import _wheel_spread

    try:
        return _wheel_spread.spread_tree(seed, list(receivers), int(fanout))
    except (TypeError, ValueError) as err:
        raise AnsibleFilterError(f"spread_tree: {err}") from err


class FilterModule:
    def filters(self):
        return {"spread_tree": spread_tree}
