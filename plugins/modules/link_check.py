#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: link_check
short_description: Refuse links planted where root is about to write, before anything changes
version_added: "1.0.0"
description:
  - Setup runs as root and writes in directories another account can change (the training
    account's home and its C(.ssh)). Such an account could put a symbolic link there (to
    C(/root/.ssh/authorized_keys), to a directory of root's, or dangling, to a path under
    C(/etc)) and have root write through it.
  - This module walks every path from C(/) without following a link that root did not make, and
    fails naming each link, hard link or other file in the way, with its fix; it changes nothing.
    Run it before the first task that changes anything on a node, so that a node with a planted
    link is left as it was.
  - The trust model it keeps is in the collection's C(docs/security.md).
options:
  directories:
    description: Directories root will make or work in; missing ones are fine.
    type: list
    elements: path
    default: []
  root_only:
    description:
      - Paths whose content root runs or trusts (a Python environment, a wheelhouse, an MPI
        prefix, a build directory), absolute. Each part of the path that exists must be root's,
        and sticky where others may write it. A missing part is fine only where root alone can
        write the directory it would be made in (not in C(/tmp), where another account could make
        it first).
    type: list
    elements: path
    default: []
  files:
    description:
      - Files root will write or edit; missing ones are fine. A C(*) in the last component names
        every file of that directory that matches it.
    type: list
    elements: path
    default: []
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
author:
  - torchfleet developers (@torchfleet)
"""

EXAMPLES = r"""
- name: Refuse links planted in the training account's home
  torchfleet.cluster.link_check:
    directories: [/home/torchfleet/.ssh, /home/torchfleet/.local/state/torchfleet]
    files: [/home/torchfleet/.ssh/authorized_keys, /home/torchfleet/.ssh/torchfleet_*]
"""

RETURN = r"""
refused:
  description: Each path refused and why (empty on success).
  returned: always
  type: list
  elements: dict
  sample: [{path: /home/torchfleet/.ssh/authorized_keys, why: "is a symbolic link (to /root/.ssh/authorized_keys) ..."}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torchfleet.cluster.plugins.module_utils._no_follow import refusals


def main():
    module = AnsibleModule(
        argument_spec={"directories": {"type": "list", "elements": "path", "default": []},
                       "files": {"type": "list", "elements": "path", "default": []},
                       "root_only": {"type": "list", "elements": "path", "default": []}},
        supports_check_mode=True,
    )
    found = refusals(module.params["directories"], module.params["files"], module.params["root_only"])
    refused = [{"path": item.path, "why": item.why, "fix": item.fix} for item in found]
    if refused:
        module.fail_json(msg="refusing to set this node up, nothing changed: " + "; ".join(map(str, found)),
                         refused=refused)
    module.exit_json(changed=False, refused=[])


if __name__ == "__main__":
    main()
