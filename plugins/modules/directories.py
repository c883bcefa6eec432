#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: directories
short_description: Several directories, each with its owner, group and mode, in one module run
version_added: "1.0.0"
description:
  - Makes each directory of O(paths) where it is missing, its missing parents too, and gives it
    the owner, group and mode asked for, as M(ansible.builtin.file) with C(state=directory) does
    for one path.
  - Each path is walked from C(/) one component at a time without following a symbolic link
    that another account than root could have made (one owned by root, in a directory only root
    can write, is followed), and changed through its own descriptor; such a link, dangling or
    not, fails the module naming it and its fix, before anything more is made (the collection's
    C(docs/security.md)).
  - One run of a module on a node for what would be one per directory in a loop of
    M(ansible.builtin.file), each of which starts Python and Ansible's module code on the node again.
options:
  paths:
    description: The directories, a parent before its children.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: The directory.
        type: path
        required: true
      owner:
        description: Its owner; unset, the owner it has (or, made here, the user that runs the module).
        type: str
      group:
        description: Its group; unset, the group it has (or, made here, that of the user that runs the module).
        type: str
      mode:
        description: Its mode, octal (V(0750)) or symbolic (V(u+rwx)), as M(ansible.builtin.file) takes it.
        type: raw
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
- name: Create the working directory for runs and its directory for scripts
  torchfleet.cluster.directories:
    paths:
      - {path: /home/torchfleet/torchfleet, owner: torchfleet, mode: "0750"}
      - {path: /home/torchfleet/torchfleet/scripts, owner: torchfleet, mode: "0750"}
"""

RETURN = r"""
changed_paths:
  description: The directories made or changed (in check mode, that would be).
  returned: success
  type: list
  elements: str
  sample: [/home/torchfleet/torchfleet/scripts]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torchfleet.cluster.plugins.module_utils._directories import ensure_directories


def main():
    module = AnsibleModule(
        argument_spec={"paths": {"type": "list", "elements": "dict", "required": True, "options": {
            "path": {"type": "path", "required": True},
            "owner": {"type": "str"},
            "group": {"type": "str"},
            "mode": {"type": "raw"},
        }}},
        supports_check_mode=True,
    )
    changed_paths = ensure_directories(module, module.params["paths"])
    module.exit_json(changed=bool(changed_paths), changed_paths=changed_paths)


if __name__ == "__main__":
    main()
