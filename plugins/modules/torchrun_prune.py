#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: torchrun_prune
short_description: Remove the directories of old runs on a node
version_added: "1.0.0"
description:
  - Removes O(log_dir)/RUN_ID for each run id in O(run_ids) on the node it runs on (the record,
    launcher log and supervisor on the head, the per-rank and per-worker logs on every node).
  - A run whose record on this node does not say it ended (running, lost), or with a process of
    it still alive here, is kept and named in RV(kept). torchfleet prunes nothing unasked.
  - Which runs to prune is decided from their records on the head (C(torchfleet runs --prune
    --keep N) or C(--older-than DAYS)); run this module on every node with that list.
options:
  log_dir:
    description: The directory holding one directory per run, as given to M(torchfleet.cluster.torchrun_launch).
    type: path
    default: ~/torchfleet/runs
  run_ids:
    description: The runs to remove. A run id without a directory here is skipped.
    type: list
    elements: str
    required: true
  run_dirs:
    description:
      - The directory of each run of O(run_ids) that is not under O(log_dir) (a run launched
        with a log_dir of its own), by run id, as its record names it (C(torchfleet runs --json)'s
        C(log_dir)). Its last path component must be the run id.
    type: dict
    default: {}
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Run it as the training account (or root).
seealso:
  - module: torchfleet.cluster.torchrun_run_info
author:
  - torchfleet developers (@torchfleet)
"""

EXAMPLES = r"""
- name: Remove two old runs' directories on every node
  torchfleet.cluster.torchrun_prune:
    run_ids: [tf-20261101-101502-ab12cd, tf-20261102-093011-ef34aa]
  become: true
  become_user: torchfleet
"""

RETURN = r"""
removed:
  description: The run ids whose directory was removed (would be, in check mode).
  returned: always
  type: list
  elements: str
kept:
  description: The run ids kept, each with why.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.record import runs_index
from ansible_collections.torchfleet.cluster.plugins.module_utils._run_prune import bad_run_id, prune_here


def main():
    module = AnsibleModule(
        argument_spec={
            "log_dir": {"type": "path", "default": "~/torchfleet/runs"},
            "run_ids": {"type": "list", "elements": "str", "required": True},
            "run_dirs": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    bad = [run_id for run_id in module.params["run_ids"] if bad_run_id(run_id)]
    if bad:
        module.fail_json(msg=f"run_ids {bad!r}: not run ids (a run's directory name under log_dir, "
                             f"as torchfleet runs lists them); remove them from the list")
    removed, kept = prune_here(module.params["log_dir"], module.params["run_ids"], module.check_mode,
                               module.params["run_dirs"], runs_index())
    module.exit_json(changed=bool(removed), removed=removed, kept=kept)


if __name__ == "__main__":
    main()
