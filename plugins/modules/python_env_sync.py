#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Make a Python environment hold exactly a locked package set, from a local wheelhouse."""

from __future__ import annotations

DOCUMENTATION = r"""
module: python_env_sync
short_description: Make a Python environment hold exactly the packages of a lock, offline
description:
  - Compares what is installed in the environment of O(python) with O(lock) (C(name==version)
    lines, each with its C(--hash=sha256:HEX)) and puts right every difference. A missing package
    or a different version is installed from O(wheelhouse) with C(pip install --no-index
    --require-hashes), so a wheel whose bytes are not the lock's fails the install, named; a
    package that the lock does not list is removed (except those in O(keep)).
  - Reports each difference it found before putting it right, so a package changed by hand on one
    node is named in the output.
  - Returns a fingerprint of what is installed (every C(name==version) and the Python version),
    which is equal on nodes that hold the same environment.
version_added: "1.0.0"
author: torchfleet developers (@torchfleet)
options:
  python:
    description: The environment's interpreter, such as C(/opt/torchfleet/envs/torchfleet/bin/python).
    type: path
    required: true
  wheelhouse:
    description: Directory on the node holding every wheel of O(lock).
    type: path
    required: true
  lock:
    description: C(name==version --hash=sha256:HEX) of every package the environment must hold.
    type: list
    elements: str
    required: true
  keep:
    description: Packages left alone although the lock does not list them (the installer itself).
    type: list
    elements: str
    default: [pip]
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reports the differences and changes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Install exactly the locked set
  torchfleet.cluster.python_env_sync:
    python: /opt/torchfleet/envs/torchfleet/bin/python
    wheelhouse: /opt/torchfleet/wheelhouse/3f2a9c0d1e2b4a5c
    lock:
      - numpy==2.4.6 --hash=sha256:0c1bb0bd53ba3b08a3ad8e3e75b4a5e1b4f0b3e5a0cdd4c6c5a3e5c8f2d1a9b7
      - torch==2.13.0+cpu --hash=sha256:8a3f1e4d0c2b6a9e7d5c3b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e
"""

RETURN = r"""
drift:
  description: The differences found before any repair, one sentence each; empty when none.
  returned: always
  type: list
  elements: str
packages:
  description: Installed packages after the run, canonical name to version.
  returned: always
  type: dict
python_version:
  description: The environment's Python version.
  returned: always
  type: str
fingerprint:
  description: SHA-256 of the Python version and every installed C(name==version), sorted.
  returned: always
  type: str
"""

import hashlib
import json
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule
# The launch's probe judges a node's environment with the same two functions.
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.packages import canonical, differences

# Runs inside the environment: every installed distribution, and the Python version.
LIST_INSTALLED = (
    "import json, platform, importlib.metadata as m\n"
    "print(json.dumps({'python': platform.python_version(), 'packages': "
    "{d.metadata['Name']: d.version for d in m.distributions()}}))"
)


def parse_lock(lines):
    """({name: version}, {name: sha256}) of lock lines `name==version --hash=sha256:HEX`."""
    wanted, hashes = {}, {}
    for line in lines:
        pin, _sep, digest = line.partition("--hash=sha256:")
        name, sep, version = pin.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise ValueError(f"lock line {line!r} is not name==version --hash=sha256:HEX")
        if not re.fullmatch(r"[0-9a-f]{64}", digest.strip()):
            raise ValueError(f"lock line {line!r} has no --hash=sha256:HEX: every node installs with the "
                             f"hashes required (the wheelhouse module writes them)")
        wanted[canonical(name.strip())] = version.strip()
        hashes[canonical(name.strip())] = digest.strip()
    return wanted, hashes


def fingerprint(python_version, packages):
    lines = [f"python=={python_version}"] + [f"{n}=={v}" for n, v in sorted(packages.items())]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def installed(module, python):
    rc, out, err = module.run_command([python, "-c", LIST_INSTALLED])
    if rc != 0:
        module.fail_json(msg=f"{python} could not list its packages: {err.strip()}", rc=rc)
    found = json.loads(out)
    return found["python"], {canonical(n): v for n, v in found["packages"].items()}


def install(module, pip, wheelhouse, lines, env):
    """pip install exactly `lines` (the lock's, hashes required) from the wheelhouse: --no-deps,
    since the lock holds every dependency, and --require-hashes, so altered bytes fail."""
    fd, requirements = tempfile.mkstemp(prefix="torchfleet-lock-", suffix=".txt")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write("".join(line + "\n" for line in lines))
        rc, out, err = module.run_command(pip + ["install", "--no-index", "--find-links", wheelhouse,
                                                 "--no-cache-dir", "--no-deps", "--require-hashes",
                                                 "-r", requirements], environ_update=env)
    finally:
        os.unlink(requirements)
    if rc != 0:
        # pip names each wheel whose hash differs ("Expected sha256 ... Got ...") and its file.
        told = [line.strip() for line in err.splitlines() if line.strip()]
        module.fail_json(msg="pip could not install from the wheelhouse " + wheelhouse + ": "
                             + " ".join(told[-8:]) + ". Run setup again: it checks every wheel and "
                             "fetches the altered ones anew", rc=rc, stdout=out, stderr=err)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            wheelhouse=dict(type="path", required=True),
            lock=dict(type="list", elements="str", required=True),
            keep=dict(type="list", elements="str", default=["pip"]),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        wanted, hashes = parse_lock(params["lock"])
    except ValueError as error:
        module.fail_json(msg=str(error))
    keep = {canonical(name) for name in params["keep"]}

    if not os.access(params["python"], os.X_OK):
        if module.check_mode:  # the environment is created by an earlier task that check mode skips
            module.exit_json(changed=True, drift=[f"{params['python']} does not exist yet"],
                             packages={}, python_version="", fingerprint="")
        module.fail_json(msg=f"{params['python']} is not there: create the environment first")

    python_version, packages = installed(module, params["python"])
    drift, to_install, to_remove = differences(packages, wanted, keep)
    if drift and not module.check_mode:
        # The node's own pip configuration (an index, a proxy) must not take part.
        env = {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        pip = [params["python"], "-m", "pip"]
        if to_install:
            lines = [f"{pin} --hash=sha256:{hashes[pin.split('==')[0]]}" for pin in to_install]
            install(module, pip, params["wheelhouse"], lines, env)
        if to_remove:
            module.run_command(pip + ["uninstall", "--yes", *to_remove], environ_update=env, check_rc=True)
        python_version, packages = installed(module, params["python"])
        left = differences(packages, wanted, keep)[0]
        if left:
            module.fail_json(msg="The environment still differs from the spec after the repair: "
                             + "; ".join(left), drift=drift)
    module.exit_json(changed=bool(drift), drift=drift, packages=packages, python_version=python_version,
                     fingerprint=fingerprint(python_version, packages))


if __name__ == "__main__":
    main()
