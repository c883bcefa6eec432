# Copyright: torchfleet contributors
"""Directories made and given their owner, group and mode, several in one module run: what
ansible.builtin.file's state=directory does for one path, done here for a list of them, without
following a link another account than root could have planted (_no_follow, docs/security.md):
each directory is walked to from `/` and changed through its own descriptor."""

from __future__ import annotations

import grp
import os
import pwd
import stat

from ansible_collections.torchfleet.cluster.plugins.module_utils._no_follow import LinkRefused, open_directory


def _uid(owner) -> int:
    if owner is None:
        return -1
    return int(owner) if str(owner).isdigit() else pwd.getpwnam(owner).pw_uid


def _gid(group) -> int:
    if group is None:
        return -1
    return int(group) if str(group).isdigit() else grp.getgrnam(group).gr_gid


def wanted_mode(module, info: os.stat_result, mode) -> int | None:
    """The permission bits `mode` asks of a directory as it is (`info`): octal (0750, "01777") or
    symbolic ("u+rwx"), as ansible.builtin.file takes it; None to leave them."""
    if mode is None:
        return None
    if isinstance(mode, int):
        return mode
    if str(mode).isdigit():
        return int(str(mode), 8)
    return module._symbolic_mode_to_octal(info, str(mode))  # pylint: disable=protected-access


def _differs(module, info: os.stat_result, entry: dict) -> tuple[int, int, int | None]:
    """(uid, gid, mode) to set on a directory as it is (`info`); -1 and None where they hold."""
    uid, gid = _uid(entry.get("owner")), _gid(entry.get("group"))
    mode = wanted_mode(module, info, entry.get("mode"))
    return (uid if uid not in (-1, info.st_uid) else -1, gid if gid not in (-1, info.st_gid) else -1,
            mode if mode is not None and mode != stat.S_IMODE(info.st_mode) else None)


def _apply(module, fd: int, entry: dict) -> bool:
    uid, gid, mode = _differs(module, os.fstat(fd), entry)
    if uid == gid == -1 and mode is None:
        return False
    if not module.check_mode:
        if uid != -1 or gid != -1:
            os.fchown(fd, uid, gid)
        if mode is not None:  # after the owner: chown clears the set-id bits
            os.fchmod(fd, mode)
    return True


def ensure_directory(module, entry: dict) -> bool:
    """Make the entry's directory where missing, its missing parents too (each given the entry's
    owner, group and mode, as ansible.builtin.file gives them), else set them where they differ.
    A link root did not make is refused, naming it. Whether anything changed (or would, in check mode)."""
    path = os.path.abspath(entry["path"])
    try:
        _uid(entry.get("owner")), _gid(entry.get("group"))
    except KeyError as error:
        module.fail_json(msg=f"{path}: no such account or group {error}: create it first, or name another",
                         path=path)
    made = []

    def make(parent_fd, name, where):
        if module.check_mode:
            raise FileNotFoundError(where)
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
        except FileExistsError:  # made meanwhile by another process: a directory is all we need
            pass
        made.append(where)
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
        try:
            _apply(module, child, entry)
        finally:
            os.close(child)

    try:
        fd = open_directory(path, make)
    except FileNotFoundError:  # check mode: it would be made
        return True
    except LinkRefused as refused:
        module.fail_json(msg=f"refusing to change anything on this node: {refused}", path=refused.path)
    try:
        return _apply(module, fd, entry) or bool(made)
    finally:
        os.close(fd)


def ensure_directories(module, entries: list) -> list:
    """Every entry's directory (in order: a parent before its children); the paths that changed."""
    return [entry["path"] for entry in entries if ensure_directory(module, entry)]
