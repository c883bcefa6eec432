"""The Python packages of an environment, read from their metadata without starting an
interpreter, and how they differ from what setup installed."""

from __future__ import annotations

import glob
import os
import re


def canonical(name: str) -> str:
    """PEP 503's normal form: Typing_Extensions and typing-extensions are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def differences(installed: dict, wanted: dict, keep) -> tuple[list, list, list]:
    """(sentences, to_install, to_remove) that turn `installed` into `wanted` ({name: version})."""
    sentences, to_install, to_remove = [], [], []
    for name, version in sorted(wanted.items()):
        have = installed.get(name)
        if have is None:
            sentences.append(f"{name} is missing (spec: {version})")
        elif have != version:
            sentences.append(f"{name} is {have}, the spec says {version}")
        else:
            continue
        to_install.append(f"{name}=={version}")
    for name in sorted(set(installed) - set(wanted) - set(keep)):
        sentences.append(f"{name} {installed[name]} is installed but not in the spec")
        to_remove.append(name)
    return sentences, to_install, to_remove


def installed_distributions(paths) -> dict:
    """{canonical name: version} of the distributions in the directories `paths`, from the Name
    and Version headers of each *.dist-info/METADATA and *.egg-info (PKG-INFO): what
    importlib.metadata reads, without its import, which alone would slow each node's check."""
    installed = {}
    for path in paths:
        try:
            entries = sorted(os.listdir(path))
        except OSError:
            continue
        for entry in entries:
            if entry.endswith(".dist-info"):
                metadata = os.path.join(path, entry, "METADATA")
            elif entry.endswith(".egg-info"):
                metadata = os.path.join(path, entry)
                if os.path.isdir(metadata):
                    metadata = os.path.join(metadata, "PKG-INFO")
            else:
                continue
            headers: dict[str, str] = {}
            try:
                with open(metadata, encoding="utf-8", errors="replace") as handle:
                    for line in handle:  # the headers end at the first empty line
                        if not line.strip():
                            break
                        key, _colon, value = line.partition(":")
                        headers.setdefault(key.strip().lower(), value.strip())
            except OSError:
                continue
            if headers.get("name"):
                installed[canonical(headers["name"])] = headers.get("version", "")
    return installed


def environment_drift(python: str, wanted: dict) -> list:
    """How the environment of the interpreter `python` differs from `wanted` ({name: version},
    what setup installed), one sentence each. Reads the distributions' metadata in the
    environment's site-packages (whichever Python runs this), so it starts no interpreter."""
    prefix = os.path.dirname(os.path.dirname(python))
    paths = glob.glob(os.path.join(prefix, "lib", "python3*", "site-packages"))
    if not paths:
        return [f"{prefix} has no lib/python3*/site-packages"]
    return differences(installed_distributions(paths), wanted, ())[0]
