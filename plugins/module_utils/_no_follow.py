# Copyright: torchfleet contributors
"""Paths walked by a process running as root without following a link that another account
could have planted (docs/security.md). A path is opened one component at a time from `/`, each
with O_NOFOLLOW, relative to the directory opened before it, so that nothing can be swapped for
a link between the check and the use. A link is followed only where root alone could have made it
(owned by root, in a directory that only root can write: /home -> /data/home, /var/run -> /run);
any other link, dangling or not, is refused, naming it."""

from __future__ import annotations

import fnmatch
import os
import stat

MAX_LINKS = 40  # links followed in one walk, as the kernel allows (ELOOP)


class LinkRefused(Exception):
    """A link, or a file not fit to be written, where an untrusted account could have put it."""

    def __init__(self, path: str, why: str, fix: str):
        super().__init__(f"{path} {why}: {fix}")
        self.path, self.why, self.fix = path, why, fix


def root_alone_writes(info: os.stat_result) -> bool:
    """Whether only root can change what a directory holds (its owner root, no group or other write)."""
    return info.st_uid == 0 and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def refused_link(path: str, target: str) -> LinkRefused:
    return LinkRefused(path, f"is a symbolic link (to {target}) where another account than root can write",
                       f"setup writes there as root and never follows such a link. Remove the link "
                       f"(rm {path}), or make it a real directory or file, then run setup again")


def _components(path: str) -> list:
    return [part for part in path.split("/") if part and part != "."]


def open_directory(path: str, make=None) -> int:
    """A descriptor of the directory `path` (absolute), walked from `/` without following a link
    that root did not make (LinkRefused). A missing component is made with `make(parent_fd, name,
    path)` where given (it creates the directory), else FileNotFoundError. The caller closes it."""
    if not path.startswith("/"):
        raise ValueError(f"{path}: not an absolute path")
    todo, followed = _components(path), 0
    fd, here = os.open("/", os.O_RDONLY | os.O_DIRECTORY), "/"
    try:
        while todo:
            name = todo.pop(0)
            if name == "..":  # within a link's target: back up from the path walked so far
                parent = os.path.dirname(here)
                todo = _components(parent) + todo
                os.close(fd)
                fd, here = os.open("/", os.O_RDONLY | os.O_DIRECTORY), "/"
                continue
            step = os.path.join(here, name)
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if make is None:
                    raise
                make(fd, name, step)
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(name, dir_fd=fd)
                if info.st_uid != 0 or not root_alone_writes(os.fstat(fd)):
                    raise refused_link(step, target)
                followed += 1
                if followed > MAX_LINKS:
                    raise LinkRefused(step, "leads through too many symbolic links", "fix the links")
                todo = _components(target) + todo
                if target.startswith("/"):
                    os.close(fd)
                    fd, here = os.open("/", os.O_RDONLY | os.O_DIRECTORY), "/"
                continue
            if not stat.S_ISDIR(info.st_mode):
                raise LinkRefused(step, "exists and is not a directory", "move it away, or name another path")
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd, here = child, step
        return fd
    except BaseException:
        os.close(fd)
        raise


def check_file(path: str) -> None:
    """Refuse (LinkRefused) a file that root would write through: `path` or a directory above it a
    link that root did not make, the file itself any link, a hard link, or not a regular file.
    Missing is fine: it would be made there."""
    try:
        fd = open_directory(os.path.dirname(path) or "/")
    except FileNotFoundError:  # its directory would be made
        return
    try:
        name = os.path.basename(path)
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(info.st_mode):
            raise refused_link(path, os.readlink(name, dir_fd=fd))
        if not stat.S_ISREG(info.st_mode):
            raise LinkRefused(path, "is not a regular file", f"move it away (mv {path} {path}.old), then run setup again")
        if info.st_nlink > 1:
            raise LinkRefused(path, f"has {info.st_nlink} hard links: another name may be a file of root's",
                              f"give it a name of its own (cp {path} {path}.new && mv {path}.new {path}), "
                              f"then run setup again")
    finally:
        os.close(fd)


def check_directory(path: str) -> None:
    """Refuse (LinkRefused) a directory that root would work in through a link root did not make,
    or that is something else than a directory. Missing is fine: it would be made there."""
    try:
        os.close(open_directory(path))
    except FileNotFoundError:
        return


def check_root_only(path: str) -> None:
    """Refuse (LinkRefused) a path whose content root will run or trust (an environment, a
    wheelhouse, an MPI prefix, a build directory) where another account could change it: each part
    of `path` that exists must be root's, and where others may write it, sticky (as /tmp is); a
    link only as open_directory follows one. A missing part is fine only where root alone can write
    the directory it would be made in: in /tmp, another account could make it first."""
    if not path.startswith("/"):
        raise LinkRefused(path or "''", "is not an absolute path",
                          "name the path from / (for example /opt/torchfleet/...)")
    fix = (f"root runs or trusts what {path} holds: name a path under directories only root can write "
           f"(as /opt/torchfleet is)")
    here = "/"
    for name in _components(path):
        step = os.path.join(here, name)
        try:
            info = os.lstat(step)
        except FileNotFoundError:
            try:
                parent = os.lstat(here)
            except FileNotFoundError:  # a link's missing target: its own check judged where it would be made
                return
            if not root_alone_writes(parent):  # passed above, so sticky (as /tmp): anyone may make `step` first
                raise LinkRefused(step, f"does not exist yet, in {here}, which other accounts can write (mode "
                                        f"{stat.S_IMODE(parent.st_mode):04o}): one of them could make it first",
                                  f"{fix}, or make {step} as root now (mkdir -m 0755 {step}), then run setup "
                                  f"again") from None
            return
        if stat.S_ISLNK(info.st_mode):
            if info.st_uid != 0 or not root_alone_writes(os.lstat(here)):
                raise refused_link(step, os.readlink(step))
            check_root_only(os.path.realpath(step))
            here = os.path.realpath(step)
            continue
        if info.st_uid != 0 or (info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX):
            raise LinkRefused(step, f"can be changed by another account than root (owner UID {info.st_uid}, mode "
                                    f"{stat.S_IMODE(info.st_mode):04o})",
                              f"{fix}, or, where {step} is meant to be root's alone, make it so "
                              f"(chown root:root {step} && chmod go-w {step})")
        here = step


def matching_files(pattern: str) -> list:
    """The files `pattern` names: itself, or where its last component holds a `*`, those of its
    directory that match (listed through the directory's descriptor, never through a link)."""
    directory, name = os.path.split(pattern)
    if "*" not in name:
        return [pattern]
    try:
        fd = open_directory(directory)
    except FileNotFoundError:
        return []
    try:
        return [os.path.join(directory, found) for found in sorted(os.listdir(fd)) if fnmatch.fnmatchcase(found, name)]
    finally:
        os.close(fd)


def refusals(directories: list, files: list, root_only: tuple = ()) -> list:
    """[LinkRefused] of every directory and file (or pattern, see matching_files) that root would
    work in or write through a link, and of every `root_only` directory another account could
    change (check_root_only): each named, none left out, nothing changed."""
    found = []
    for directory in root_only:
        try:
            check_root_only(directory)
        except LinkRefused as refused:
            found.append(refused)
    for directory in directories:
        try:
            check_directory(directory)
        except LinkRefused as refused:
            found.append(refused)
    for pattern in files:
        try:
            for path in matching_files(pattern):
                check_file(path)
        except LinkRefused as refused:
            found.append(refused)
    return found
