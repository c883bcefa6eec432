#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Serve a node's wheels to the other nodes of the cluster while setup spreads them."""

from __future__ import annotations

DOCUMENTATION = r"""
module: wheel_server
short_description: Serve a node's wheelhouse to the other nodes over HTTP while setup spreads it
description:
  - O(state=started) serves the wheels named in O(files), and nothing else, from O(path) on
    O(address) and O(port) only (the cluster network's address, never every interface), until
    O(state=stopped) or O(timeout) seconds. It blocks while it serves, so run it with C(async)
    and C(poll=0); Ansible's async wrapper ends it at the C(async) time in any case.
  - A wheel not yet in O(path) is answered C(503) (ask again) while the node still fetches it
    (O(pending=true), until M(torchfleet.cluster.wheel_files) ends), and C(404) afterwards, so a
    child passes over to its next source.
  - O(state=stopped) ends the server of O(path) and waits until its port is closed.
  - The clients check every wheel against the lock's sha256 (M(torchfleet.cluster.wheel_files)),
    so what this server sends is not trusted, only checked.
version_added: "1.0.0"
author: torchfleet developers (@torchfleet)
options:
  state:
    description: Whether to serve (blocks) or to end the server of O(path).
    type: str
    choices: [started, stopped]
    default: started
  path:
    description: The node's wheelhouse directory for this spec.
    type: path
    required: true
  files:
    description: The file names that may be served. Required with O(state=started).
    type: list
    elements: str
    default: []
  address:
    description: The address to listen on. Required with O(state=started).
    type: str
  port:
    description: The TCP port to listen on.
    type: int
    default: 29610
  pending:
    description: This node still fetches wheels itself, so a wheel it lacks is answered C(503).
    type: bool
    default: false
  timeout:
    description: Seconds after which the server ends by itself.
    type: int
    default: 1800
  idle_timeout:
    description:
      - Seconds a client's connection may stay idle (no request sent, or no byte of the answer
        taken) before the server closes it, so that a client gone silent holds no thread until
        the server ends. A slow download that still moves is never cut.
    type: int
    default: 30
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Serves nothing and stops nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Serve the wheels on the cluster network while the other nodes fetch them
  torchfleet.cluster.wheel_server:
    path: /opt/torchfleet/wheelhouse/3f2a9c0d1e2b4a5c
    files: "{{ wheels.wheels | map(attribute='file') }}"
    address: 10.0.0.1
  async: 1800
  poll: 0

- name: End it
  torchfleet.cluster.wheel_server:
    path: /opt/torchfleet/wheelhouse/3f2a9c0d1e2b4a5c
    state: stopped
"""

RETURN = r"""
served_bytes:
  description: Bytes sent, by client address (O(state=started)).
  returned: always
  type: dict
stopped_pid:
  description: The server process ended (O(state=stopped)); none when no server ran.
  returned: always
  type: int
"""

import json
import os
import signal
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.ports import port_holders
from ansible_collections.torchfleet.cluster.plugins.module_utils._wheel_spread import SERVING, listening, serve


def alive(pid):
    """Whether the process runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop(module, directory):
    marker = os.path.join(directory, SERVING)
    try:
        with open(marker) as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        module.exit_json(changed=False, served_bytes={}, stopped_pid=None)
    if module.check_mode:
        module.exit_json(changed=True, served_bytes={}, stopped_pid=found.get("pid"))
    os.unlink(marker)  # the server's own signal to end
    pid, deadline = found.get("pid"), time.monotonic() + 10
    while pid and alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if pid and alive(pid):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while listening(found["address"], found["port"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    if listening(found["address"], found["port"]):
        module.fail_json(msg=f"{found['address']}:{found['port']} still listens after the wheel server "
                             f"(pid {pid}) was ended: {', '.join(port_holders(found['port'])) or 'unknown'}")
    module.exit_json(changed=True, served_bytes={}, stopped_pid=pid)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["started", "stopped"], default="started"),
            path=dict(type="path", required=True),
            files=dict(type="list", elements="str", default=[]),
            address=dict(type="str"),
            port=dict(type="int", default=29610),
            pending=dict(type="bool", default=False),
            timeout=dict(type="int", default=1800),
            idle_timeout=dict(type="int", default=30),
        ),
        required_if=[("state", "started", ["address", "files"])],
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "stopped":
        stop(module, p["path"])
    if module.check_mode:
        module.exit_json(changed=False, served_bytes={}, stopped_pid=None)
    try:
        served = serve(p["path"], p["files"], p["address"], p["port"], p["timeout"], p["pending"],
                       idle_timeout=p["idle_timeout"])
    except OSError as err:
        holders = port_holders(p["port"])
        module.fail_json(msg=f"cannot serve the wheels on {p['address']}:{p['port']}: {err.strerror or err}"
                             + (f" (held by {', '.join(holders)})" if holders else "")
                             + ". Choose another port with -e python_env_spread_port=N")
    module.exit_json(changed=False, served_bytes=served, stopped_pid=None)


if __name__ == "__main__":
    main()
