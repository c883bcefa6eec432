# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""One launch at a time per cluster, decided on the head: a start holds an exclusive lock from
before its checks of the nodes until its supervisor has recorded the run. A second start
meanwhile is refused before it checks, copies or starts anything, naming the run that holds the
lock; once that run is recorded, the checks find it alive and refuse as before. The lock is the
kernel's (flock): a start that dies, however, lets it go with its process. Its file lives in a
directory only the training account can write (~/.local/state/torchfleet, mode 0700), never under a name another account could take first in a
shared /tmp; not in the runs' directory: a launch that is refused leaves every run as it was."""

from __future__ import annotations

import fcntl
import os
import pwd
import stat
import time

LOCK_NAME = "launch.lock"


def lock_dir() -> str:
    """The account's own directory for the lock, ~/.local/state/torchfleet (setup makes it): one
    place whatever the environment (HOME, XDG_RUNTIME_DIR), so that a login session and a sudo
    hold the same lock."""
    return os.path.join(account_home(), ".local", "state", "torchfleet")


def account_home() -> str:
    """This account's home as the system knows it, not $HOME (which sudo may keep as the caller's)."""
    return pwd.getpwuid(os.getuid()).pw_dir


def lock_path() -> str:
    """The head's lock for this account's launches and restarts."""
    return os.path.join(lock_dir(), LOCK_NAME)


def own_directory(path: str) -> None:
    """Make `path` (and its parents) this account's, mode 0700; OSError naming the fix where it
    is another account's or others may write it."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    found = os.lstat(path)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
        raise OSError(f"{path} is not a directory of this account (uid {os.getuid()}): remove it "
                      f"and run setup.yml again, which makes it")
    if stat.S_IMODE(found.st_mode) != 0o700:
        os.chmod(path, 0o700)


class LaunchLocked(Exception):
    """Another start holds the lock; the message names its run and since when."""


def hold(run_id: str, path: str | None = None) -> int:
    """Take the lock (a file descriptor to keep open until the run is recorded, then `release`),
    or raise LaunchLocked naming the run that holds it; OSError naming the fix where the lock's
    directory is not the account's own."""
    if path is None:
        own_directory(lock_dir())
    fd = os.open(path or lock_path(), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 256).decode("utf-8", "replace").strip() or "another launch"
        os.close(fd)
        raise LaunchLocked(holder) from None
    # Who holds it, for the start refused meanwhile to name.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"run {run_id} (started {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())})".encode(), 0)
    return fd


def wait_free(seconds: float, path: str | None = None) -> bool:
    """Wait until no start holds the lock (at most `seconds`), so that a stop sees the run of a
    start in flight once it is recorded, or that start gone. True when free (or no start ever ran
    here); the lock file is never created here."""
    try:
        fd = os.open(path or lock_path(), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return True
    deadline = time.monotonic() + seconds
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.1)
    finally:
        os.close(fd)


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)
