#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_probe
short_description: One node's view of the cluster network, and whether a port is free on it
version_added: "1.0.0"
description:
  - Reads the node's IPv4 interfaces; makes the TCP connects asked for, each from a given source
    address (and, as root, interface) to a given target; and tells whether a TCP port is taken on
    the node, and by which process. Changes nothing.
  - The port check is the one the launch makes before it starts a run, so the doctor and the
    launch judge the rendezvous port alike.
options:
  connect:
    description:
      - The connects to make, all at once; each has C(key) (its name in RV(connect)), C(source) and
        C(target) addresses, C(port) (default 22) and C(interface).
      - M(torchfleet.cluster.doctor_probe_plan) plans them.
    type: list
    elements: dict
    default: []
  port:
    description: A TCP port to check on this node.
    type: int
  timeout:
    description: Seconds for each connect.
    type: float
    default: 3
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads only.
  diff_mode:
    support: none
  platform:
    platforms: posix
seealso:
  - plugin: torchfleet.cluster.doctor_probe_plan
    plugin_type: filter
author:
  - torchfleet developers (@torchfleet)
"""

EXAMPLES = r"""
- name: Read the node's interfaces
  torchfleet.cluster.node_probe:
  register: probe

- name: Reach the head from this node's cluster address, and check the rendezvous port
  torchfleet.cluster.node_probe:
    connect:
      - {key: head, interface: eth0, source: 10.0.0.12, target: 10.0.0.11, port: 22}
    port: 29400
    timeout: 5
"""

RETURN = r"""
interfaces:
  description: Interface name to its IPv4 address.
  returned: always
  type: dict
  sample: {eth0: 10.0.0.12}
connect:
  description: Each connect's key to C(ok) and C(error).
  returned: always
  type: dict
  sample: {"eth0|node0": {"ok": true, "error": ""}}
port:
  description: With O(port), C(in_use) and C(holders) (the processes that hold it); null otherwise.
  returned: always
  type: dict
  sample: {"in_use": false, "holders": []}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.interfaces import connect_all, ipv4_interfaces
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.ports import port_holders, port_in_use


def main():
    module = AnsibleModule(
        argument_spec={
            "connect": {"type": "list", "elements": "dict", "default": []},
            "port": {"type": "int"},
            "timeout": {"type": "float", "default": 3},
        },
        supports_check_mode=True,
    )
    params = module.params
    interfaces = ipv4_interfaces()
    connected = connect_all(params["connect"], interfaces.values(), params["timeout"])
    port = None
    if params["port"]:
        in_use = port_in_use(params["port"])
        port = {"in_use": in_use, "holders": port_holders(params["port"]) if in_use else []}
    module.exit_json(changed=False, interfaces=interfaces, connect=connected, port=port)


if __name__ == "__main__":
    main()
