#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Make a node's wheelhouse hold the lock's wheels, verified by sha256, fetched from its peers."""

from __future__ import annotations

DOCUMENTATION = r"""
module: wheel_files
short_description: Check a node's wheelhouse against the lock's hashes, and fetch what it lacks from other nodes
description:
  - Checks every file of O(files) in the directory O(path) against its sha256. A wheel is read
    in full only when its size or modification time changed since it was last checked, so an
    unchanged wheelhouse costs one C(stat) per file.
  - With O(sources), fetches each missing or altered wheel over HTTP from the first source that
    gives it, and checks the bytes against the sha256 before the file takes its name. Each
    download writes a temporary file of its own (C(.NAME.RANDOM.partial)), hashed as it is
    written, and only that file, whole and hashed, is renamed to the wheel's name, so two setups
    fetching into one directory at once never mix their bytes. A source that is still fetching
    the wheel itself (served by M(torchfleet.cluster.wheel_server) with
    O(torchfleet.cluster.wheel_server#module:pending=true)) is asked again until O(timeout). A
    source that cannot be reached, or does not have the wheel, or sends other bytes, is passed
    over for the next. No download writes more than the wheel's C(size); a source that announces
    or sends more is cut off at that size, its temporary file removed, and passed over too, so
    whatever answers on a source's port cannot fill the node's disk.
  - Without O(sources), only reports what is missing or altered (RV(missing), RV(corrupt)).
  - With O(sources), removes at the end the temporary files of fetches that were killed before
    they could remove their own (unlocked, and older than a minute); never those of a fetch that
    still runs.
  - Run with C(async) when other nodes fetch from this one's server at the same time, so that
    every node fetches at once whatever the number of forks.
version_added: "1.0.0"
author: torchfleet developers (@torchfleet)
options:
  path:
    description: The node's wheelhouse directory for this spec. Made when missing.
    type: path
    required: true
  files:
    description:
      - The files, each with C(file) (its name), C(sha256) and C(size) (its bytes), as
        M(torchfleet.cluster.wheelhouse) returns them in its C(files), the wheels and their lock.
    type: list
    elements: dict
    required: true
  sources:
    description: Base URLs of other nodes' wheel servers, in the order to ask them.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds to wait at most, for all the wheels together.
    type: int
    default: 1800
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reports what is missing or altered; fetches nothing and records no hash.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Check the wheelhouse, and fetch what is missing from the parent, else from the seed
  torchfleet.cluster.wheel_files:
    path: /opt/torchfleet/wheelhouse/3f2a9c0d1e2b4a5c
    files: "{{ wheels.files }}"
    sources: [http://10.0.0.1:29610/, http://10.0.0.2:29610/]
"""

RETURN = r"""
missing:
  description: Wheels absent or altered before the run (the ones fetched, with O(sources)).
  returned: always
  type: list
  elements: str
corrupt:
  description: One sentence for each wheel found altered, naming it.
  returned: always
  type: list
  elements: str
fetched_bytes:
  description: Bytes fetched by this run, by source.
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torchfleet.cluster.plugins.module_utils._wheel_spread import (
    FETCHING, SpreadError, check_wheels, fetch_wheels, read_verified, remove_stale, write_verified)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            files=dict(type="list", elements="dict", required=True),
            sources=dict(type="list", elements="str", default=[]),
            timeout=dict(type="int", default=1800),
        ),
        supports_check_mode=True,
    )
    p = module.params
    # The size bounds each download (fetch_wheels): without it, a source could send without end.
    bad = [wheel for wheel in p["files"] if not {"file", "sha256"} <= set(wheel) or "/" in str(wheel["file"])
           or not str(wheel.get("size")).isdigit()]
    if bad:
        module.fail_json(msg=f"every file needs a name (file), its sha256 and its size in bytes (as the wheelhouse "
                             f"module returns them); got {bad[:3]}")
    for wheel in p["files"]:
        wheel["size"] = int(wheel["size"])
    directory = p["path"]
    if not os.path.isdir(directory):
        if module.check_mode:
            module.exit_json(changed=bool(p["files"]), missing=[w["file"] for w in p["files"]],
                             corrupt=[], fetched_bytes={})
        os.makedirs(directory, mode=0o755, exist_ok=True)  # another setup's fetch may make it first
    known = read_verified(directory)
    missing, corrupt, verified = check_wheels(directory, p["files"], known)
    fetched = {}
    try:
        if missing and p["sources"] and not module.check_mode:
            wanted = [wheel for wheel in p["files"] if wheel["file"] in missing]
            try:
                fetched = fetch_wheels(directory, wanted, p["sources"], p["timeout"])
            except SpreadError as err:
                module.fail_json(msg=f"{err}. Check that the nodes reach each other on the cluster network, "
                                     f"and that only setup's wheel servers answer on its port "
                                     f"(python_env_spread_port), then run setup again",
                                 missing=missing, corrupt=corrupt)
            for wheel in wanted:  # hashed while fetched: record it, not read again next time
                stat = os.stat(os.path.join(directory, wheel["file"]))
                verified[wheel["file"]] = [stat.st_size, stat.st_mtime_ns, wheel["sha256"]]
    finally:
        if p["sources"] and not module.check_mode:
            # Tell the children asking this node's server that it will have nothing more.
            try:
                os.unlink(os.path.join(directory, FETCHING))
            except OSError:
                pass  # gone, or not a file of ours: the next fetch says what is wrong with it
            # Each fetch removed its own temporary files; these are only those of fetches killed
            # before they could. Another setup's fetch, running, keeps its own.
            remove_stale(directory)
    if not module.check_mode and verified != known:
        write_verified(directory, verified)
    module.exit_json(changed=bool(missing) and bool(p["sources"]),
                     missing=missing, corrupt=corrupt, fetched_bytes=fetched)


if __name__ == "__main__":
    main()
