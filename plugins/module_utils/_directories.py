# Copyright: torchfleet contributors
"""Directories made and given their owner, group and mode, several in one module run: what
ansible.builtin.file's state=directory does for one path, done here for a list of them."""

from __future__ import annotations

import os


def ensure_directory(module, entry: dict) -> bool:
    """Make the entry's directory where missing, its missing parents too (each given the entry's
    owner, group and mode, as ansible.builtin.file gives them), else set them where they differ.
    A symbolic link is followed. Whether anything changed (or would, in check mode)."""
    path = os.path.realpath(entry["path"]) if os.path.islink(entry["path"]) else entry["path"]
    attributes = module.load_file_common_arguments(
        {"path": path, "owner": entry.get("owner"), "group": entry.get("group"), "mode": entry.get("mode")})
    if os.path.isdir(path):
        return module.set_fs_attributes_if_different(attributes, False, expand=False)
    if os.path.lexists(path):
        module.fail_json(msg=f"{path} exists and is not a directory: move it away, or name another path",
                         path=path)
    if module.check_mode:
        return True
    missing = []
    parent = path
    while not os.path.isdir(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    for created in reversed(missing):
        try:
            os.mkdir(created)
        except FileExistsError:  # made meanwhile by another process: a directory is all we need
            if not os.path.isdir(created):
                raise
        module.set_fs_attributes_if_different(dict(attributes, path=created), True, expand=False)
    return True


def ensure_directories(module, entries: list) -> list:
    """Every entry's directory (in order: a parent before its children); the paths that changed."""
    return [entry["path"] for entry in entries if ensure_directory(module, entry)]
