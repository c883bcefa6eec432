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


def account_of(where: str) -> str | None:
    """The account whose runs `where` holds, as given: `~ACCOUNT/...` names it; else the owner of
    its nearest part that exists (not followed, if a link). None for root's own, where only root
    can write; Refused where another account than root could have put the files there."""
    if where.startswith("~"):
        name = where[1:].split("/", 1)[0]
        if name:
            return None if pwd.getpwnam(name).pw_uid == 0 else name
        where = os.path.expanduser(where)
    path = os.path.abspath(where)
    while True:
        try:
            info = os.lstat(path)
            break
        except FileNotFoundError:
            if os.path.dirname(path) == path:
                raise
            path = os.path.dirname(path)
    if info.st_uid != 0:
        try:
            return pwd.getpwuid(info.st_uid).pw_name
        except KeyError:
            raise Refused(f"{path} belongs to UID {info.st_uid}, which has no account here") from None
    if stat.S_ISDIR(info.st_mode) and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise Refused(f"{path} is root's but other accounts write there: name the run (its directory "
                      f"is its account's), or follow it logged in as that account")
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
