#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Download a pinned package set once, on the controller, for nodes that never ask an index."""

from __future__ import annotations

DOCUMENTATION = r"""
module: wheelhouse
short_description: Download the wheels of a package spec once, for nodes that install offline
description:
  - Runs C(pip download) for every package of O(packages) and their dependencies, for the
    nodes' Python version, machine and C library, into a directory named after a hash of all of
    that. A directory that is already complete is used as it is, so an unchanged spec downloads
    nothing.
  - Writes C(requirements.lock) beside the wheels, with one C(name==version --hash=sha256:HEX) line
    for every wheel, in pip's hash-checking form. That is the exact set the nodes install, with
    C(pip install --no-index --require-hashes), so a wheel altered on its way to a node or on
    the node fails the install. A lock of an earlier version without hashes gets them from the
    wheels it lists.
  - When the spec holds an NCCL wheel (C(nvidia-nccl-*)) and the PyTorch wheel requires another
    NCCL build or version, fails naming both, since the two would load different libraries.
  - Meant to run on the controller, once per play (C(delegate_to=localhost) and C(run_once=true)).
version_added: "1.0.0"
author: torchfleet developers (@torchfleet)
options:
  packages:
    description: Requirement strings, such as C(torch==2.13.0) or C(numpy).
    type: list
    elements: str
    required: true
  root:
    description: Directory that holds one sub-directory per spec.
    type: path
    required: true
  python_version:
    description: The nodes' Python version, C(MAJOR.MINOR).
    type: str
    required: true
  machine:
    description: The nodes' machine name, as C(platform.machine()) gives it (C(x86_64), C(aarch64)).
    type: str
    required: true
  glibc:
    description:
      - The C library version of each node (C(2.36)); wheels tagged for a newer one than the oldest
        are not taken. An empty entry (a libc that is not glibc) admits only pure-Python wheels.
    type: list
    elements: str
    default: []
  pip_args:
    description: Extra arguments for C(pip download), such as C(--index-url URL).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reports whether a download would happen, and downloads nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Download the wheels once
  torchfleet.cluster.wheelhouse:
    packages: [torch==2.13.0, numpy]
    root: ~/.cache/torchfleet/wheelhouse
    python_version: "3.11"
    machine: x86_64
    glibc: ["2.36", "2.35"]
  delegate_to: localhost
  run_once: true
  register: wheels
"""

RETURN = r"""
path:
  description: Directory holding the wheels and C(requirements.lock).
  returned: always
  type: str
lock:
  description: C(name==version --hash=sha256:HEX) of every wheel, sorted by name.
  returned: when the wheels are there (always outside check mode)
  type: list
  elements: str
files:
  description:
    - Every wheel of the lock, then C(requirements.lock) itself, which the nodes keep beside the
      wheels.
  returned: when the wheels are there (always outside check mode)
  type: list
  elements: dict
  contains:
    file:
      description: The file's name in RV(path).
      type: str
    sha256:
      description: SHA-256 of the file, as the lock pins it.
      type: str
    size:
      description: Bytes.
      type: int
downloaded_bytes:
  description: Bytes of wheels fetched by this run; 0 when the spec was already there.
  returned: always
  type: int
"""

import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import zipfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torchfleet.cluster.plugins.module_utils._wheel_spread import sha256_file

LOCK = "requirements.lock"
# Oldest manylinux glibc a wheel may be tagged with (PEP 600); older wheels use 2_17 or below.
FIRST_GLIBC_MINOR = 5


def canonical(name):
    # PEP 503 normalization: "Typing_Extensions" and "typing-extensions" are the same project.
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name_version(filename):
    parts = filename[:-len(".whl")].split("-")
    return canonical(parts[0]), parts[1]


def platform_tags(machine, glibc):
    if not glibc:
        return []
    major, minor = (int(part) for part in glibc.split(".")[:2])
    tags = [f"manylinux_{major}_{m}_{machine}" for m in range(minor, FIRST_GLIBC_MINOR - 1, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{name}_{machine}" for m, name in legacy.items() if m <= minor]
    return tags + [f"linux_{machine}"]


def oldest_glibc(versions):
    if not versions or "" in versions:
        return ""
    return min(versions, key=lambda version: tuple(int(part) for part in version.split(".")))


def with_lock(directory, wheels):
    """The module's `files`: the wheels, and the lock, which the nodes keep beside them."""
    path = os.path.join(directory, LOCK)
    return wheels + [{"file": LOCK, "sha256": sha256_file(path), "size": os.path.getsize(path)}]


def describe(directory, files):
    """The wheels ([{file, sha256, size}]) and the lock's lines for the wheel files of `directory`."""
    wheels = [{"file": f, "sha256": sha256_file(os.path.join(directory, f)),
               "size": os.path.getsize(os.path.join(directory, f))} for f in sorted(files)]
    lock = sorted("%s==%s --hash=sha256:%s" % (*wheel_name_version(w["file"]), w["sha256"]) for w in wheels)
    return wheels, lock


def read_lock(directory):
    """(wheels, lock) from a complete spec directory, without hashing when the lock has the
    hashes; None when its lock predates hashes (then the caller hashes the files)."""
    with open(os.path.join(directory, LOCK)) as handle:
        lock = sorted(line.strip() for line in handle if line.strip())
    hashes = {}
    for line in lock:
        pin, sep, digest = line.partition(" --hash=sha256:")
        if not sep:
            return None
        hashes[pin] = digest.strip()
    wheels = []
    for name in sorted(f for f in os.listdir(directory) if f.endswith(".whl")):
        pin = "%s==%s" % wheel_name_version(name)
        if pin not in hashes:
            return None
        wheels.append({"file": name, "sha256": hashes[pin], "size": os.path.getsize(os.path.join(directory, name))})
    return (wheels, lock) if len(wheels) == len(lock) else None


def write_lock(directory, lock):
    with open(os.path.join(directory, LOCK + ".partial"), "w") as handle:
        handle.write("".join(line + "\n" for line in lock))
    os.replace(os.path.join(directory, LOCK + ".partial"), os.path.join(directory, LOCK))


def spec_key(params, glibc):
    fields = {key: params[key] for key in ("python_version", "machine", "pip_args")}
    fields.update(packages=sorted(params["packages"]), glibc=glibc)
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def requirement_pins(requirements):
    """{canonical name: version} for requirements written as name==version (markers ignored)."""
    pins = {}
    for line in requirements:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*([^\s;,]+)", line)
        if match:
            pins[canonical(match.group(1))] = match.group(2)
    return pins


def torch_nccl_pins(directory, files):
    """NCCL wheels that the downloaded PyTorch wheel requires, as {name: version}."""
    for filename in files:
        if wheel_name_version(filename)[0] != "torch":
            continue
        with zipfile.ZipFile(os.path.join(directory, filename)) as wheel:
            metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
            lines = wheel.read(metadata).decode("utf-8", "replace").splitlines()
        requires = [line.split(":", 1)[1] for line in lines if line.startswith("Requires-Dist:")]
        return {name: version for name, version in requirement_pins(requires).items()
                if name.startswith("nvidia-nccl-")}
    return {}


def nccl_conflict(spec, torch_pins):
    wanted = {name: version for name, version in requirement_pins(spec).items()
              if name.startswith("nvidia-nccl-")}
    if not wanted or not torch_pins or wanted == torch_pins:
        return None
    have = ", ".join(f"{n}=={v}" for n, v in wanted.items())
    need = ", ".join(f"{n}=={v}" for n, v in torch_pins.items())
    return (f"The spec asks for {have}, but its PyTorch wheel is built against {need}: two NCCL "
            f"libraries would be installed. Set nccl_package and nccl_version to {need}.")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            packages=dict(type="list", elements="str", required=True),
            root=dict(type="path", required=True),
            python_version=dict(type="str", required=True),
            machine=dict(type="str", required=True),
            glibc=dict(type="list", elements="str", default=[]),
            pip_args=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if not re.fullmatch(r"\d+\.\d+", params["python_version"]):
        module.fail_json(msg=f"python_version must be MAJOR.MINOR, got {params['python_version']!r}")
    bad = [v for v in params["glibc"] if v and not re.fullmatch(r"\d+\.\d+", v)]
    if bad:
        module.fail_json(msg=f"glibc versions must be MAJOR.MINOR or empty, got {bad}")
    glibc = oldest_glibc(params["glibc"])

    path = os.path.join(params["root"], spec_key(params, glibc))
    lock_path = os.path.join(path, LOCK)
    if not module.check_mode:
        # Two controllers asking for one spec at once (two terminals, two accounts' setups): one
        # downloads, the other waits for it here and then finds the spec complete. Held until exit.
        os.makedirs(params["root"], exist_ok=True)
        downloading = open(path + ".downloading", "a", encoding="utf-8")  # pylint: disable=consider-using-with
        fcntl.flock(downloading, fcntl.LOCK_EX)
    if os.path.exists(lock_path):
        found = read_lock(path)
        upgraded = found is None
        if upgraded:  # a lock written before the hashes were pinned: pin them now
            if module.check_mode:
                module.exit_json(changed=True, path=path, downloaded_bytes=0)
            found = describe(path, [f for f in os.listdir(path) if f.endswith(".whl")])
            write_lock(path, found[1])
        module.exit_json(changed=upgraded, path=path, files=with_lock(path, found[0]), lock=found[1],
                         downloaded_bytes=0)
    if module.check_mode:
        module.exit_json(changed=True, path=path, downloaded_bytes=0)

    # A download that stops half way leaves only the .partial directory behind.
    partial = path + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    python_tag = params["python_version"].replace(".", "")
    argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--dest", partial,
            "--only-binary=:all:", "--implementation", "cp", "--python-version", params["python_version"],
            "--abi", f"cp{python_tag}", "--abi", "abi3", "--abi", "none"]
    for tag in platform_tags(params["machine"], glibc):
        argv += ["--platform", tag]
    argv += params["pip_args"] + params["packages"]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        shutil.rmtree(partial, ignore_errors=True)
        module.fail_json(msg="pip could not download the spec for Python %s on %s (glibc %s): %s"
                         % (params["python_version"], params["machine"], glibc or "none",
                            err.strip().splitlines()[-1] if err.strip() else out[-500:]),
                         cmd=argv, stdout=out, stderr=err, rc=rc)

    files = sorted(f for f in os.listdir(partial) if f.endswith(".whl"))
    conflict = nccl_conflict(params["packages"], torch_nccl_pins(partial, files))
    if conflict:
        shutil.rmtree(partial, ignore_errors=True)
        module.fail_json(msg=conflict)
    wheels, lock = describe(partial, files)
    write_lock(partial, lock)
    os.rename(partial, path)
    module.exit_json(changed=True, path=path, files=with_lock(path, wheels), lock=lock,
                     downloaded_bytes=sum(wheel["size"] for wheel in wheels))


if __name__ == "__main__":
    main()
