"""Root's privileges put down before a run's files are read (docs/security.md): a run directory,
its record and its plan (run.json) are written by the training account and by every rank, so a
process started as root (the follower, when the torchfleet command logs in to the head as root)
becomes the directory's account first, and whatever those files name (an ssh program, a package
path) runs with that account's rights alone. Standard library only, and nothing of its package
(the follower ships it)."""

from __future__ import annotations

import os
import pwd
import stat


class Refused(Exception):
    """Root was asked to read a directory it cannot tell the owner of."""


MAX_LINKS = 40  # as the kernel's own bound on links in one path


def _writable_by_others(info: os.stat_result) -> bool:
    return bool(info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _shared(path: str) -> Refused:
    return Refused(f"{path} is root's but other accounts write there: name the run (its directory "
                   f"is its account's), or follow it logged in as that account")


def account_of(where: str) -> str | None:
    """The account whose runs `where` holds: `~ACCOUNT/...` names it; else the owner of the first
    part of the path, walked from `/` as the kernel would resolve it, that is not root's. None
    for root's own, every part root's where only root can write (so nobody can change what the
    path resolves to after this look); Refused where another account than root could.

    Nothing is taken as text: `..` goes up from where the walk is, and a link (root's, in a
    directory only root writes) is read and walked in turn, so `~acct/L/../../x` is the account's
    (the walk stops at its home), not what the text would normalise to."""
    if where.startswith("~"):
        name = where[1:].split("/", 1)[0]
        if name and pwd.getpwnam(name).pw_uid != 0:
            return name
        where = os.path.expanduser(where)
    parts = [part for part in os.path.join(os.getcwd(), where).split("/") if part not in ("", ".")]
    current, links = "/", 0
    while parts:
        name = parts.pop(0)
        if name == "..":
            current = os.path.dirname(current)  # a directory of root's that only root writes: as it is
            continue
        path = os.path.join(current, name)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            break  # the rest does not exist yet: whoever can write `current` could make it
        if info.st_uid != 0:
            try:
                return pwd.getpwuid(info.st_uid).pw_name
            except KeyError:
                raise Refused(f"{path} belongs to UID {info.st_uid}, which has no account here") from None
        if stat.S_ISLNK(info.st_mode):
            links += 1
            if links > MAX_LINKS:
                raise Refused(f"{where}: more than {MAX_LINKS} links")
            target = os.readlink(path)
            parts[:0] = [part for part in target.split("/") if part not in ("", ".")]
            if target.startswith("/"):
                current = "/"
            continue
        if not stat.S_ISDIR(info.st_mode):
            return None  # a file of root's, in a directory only root writes
        if _writable_by_others(info) and not (info.st_mode & stat.S_ISVTX and parts):
            raise _shared(path)  # others may swap what it holds (no sticky bit), or put the run there (the end)
        current = path
    info = os.lstat(current)
    if _writable_by_others(info):
        raise _shared(current)
    return None


def become(account: str) -> None:
    """This process as `account` for good: its groups, group and user; HOME and the working
    directory its own."""
    entry = pwd.getpwnam(account)
    os.setgroups(os.getgrouplist(account, entry.pw_gid))
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    os.environ.update(HOME=entry.pw_dir, USER=account, LOGNAME=account)
    os.chdir("/")


def drop_root(where: str) -> None:
    """As root, become the account whose runs `where` holds (account_of) before reading anything
    there; as any other account, nothing."""
    if os.geteuid() != 0:
        return
    account = account_of(where)
    if account is not None:
        become(account)
