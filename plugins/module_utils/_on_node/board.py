"""The run board: where each node's runs announce themselves to every account of the cluster.

Setup makes BOARD on every node, root's, mode 1777 like /tmp: every training account may write
there, and the sticky bit keeps each from removing or renaming another's entry. A launch writes
one entry per node of its run (`UID.RUN_ID.json`: the run, its head, nodes, world size and start)
before it starts anything, so that another account's launch onto those nodes is refused, naming
it, whatever port it picks. An entry's owner is the file's owner, never what it says: one whose
name's UID is not its owner is ignored, so no account can speak for another.

An entry is alive while a process of its owner names the run on its command line (the
supervisor's run directory, torchrun's --rdzv-id and --log-dir, Open MPI's daemons), or for
STARTING_FOR seconds after it was written (the start in between). So an entry that nobody
removed (a run ended, a node rebooted, a launch killed) stops counting by itself; its account's
launches remove it a day later (sweep_own), and a launch refused removes its own at once. Ranks' own command lines
do not name the run: a node counts as busy through its torchrun or launcher.

The probe runs this file on every node (see ssh_to_nodes.probe_command); the standard library only.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import time

BOARD = "/var/lib/torchfleet/board"
STARTING_FOR = 180  # seconds an entry counts with no process of its run yet: the launch's start
SWEPT_AFTER = 86400  # seconds after which this account's next launch removes its dead entries
ENTRY_BYTES = 1 << 16  # an entry longer than this is not ours
_ENTRY = re.compile(r"^(\d+)\.([A-Za-z0-9_.-]+)\.json$")


def entry_path(board: str, uid: int, run_id: str) -> str:
    return os.path.join(board, f"{uid}.{run_id}.json")


def account_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _processes_by_uid(uids: set) -> dict:
    """{uid: [command line as text]} of the processes of `uids` this node shows."""
    found: dict = {uid: [] for uid in uids}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{entry}").st_uid
            if uid not in found:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read()
        except OSError:
            continue  # gone meanwhile
        found[uid].append(argv.replace(b"\0", b" ").decode("utf-8", "replace"))
    return found


def names_run(command: str, run_id: str) -> bool:
    """Whether a command line names the run: as a path component or an option's value."""
    return re.search(r"(?:^|[\s=/])" + re.escape(run_id) + r"(?:$|[\s/])", command) is not None


def read_entries(board: str = BOARD, now: float | None = None) -> list[dict]:
    """Every entry of the board that is its owner's and alive, with `account`, `uid` and `state`
    (running: a process of its owner names the run; starting: written less than STARTING_FOR s
    ago, none yet). Dead entries are left (only their owner may remove them)."""
    now = time.time() if now is None else now
    try:
        names = os.listdir(board)
    except OSError:
        return []
    entries = []
    for name in sorted(names):
        match = _ENTRY.match(name)
        if not match:
            continue
        path = os.path.join(board, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if not (info.st_mode & 0o170000 == 0o100000 and info.st_uid == int(match.group(1))
                    and info.st_size <= ENTRY_BYTES):
                continue  # not its owner's: a name that speaks for another account
            said = json.loads(os.read(fd, ENTRY_BYTES).decode("utf-8", "replace"))
        except (OSError, ValueError):
            continue
        finally:
            os.close(fd)
        if not isinstance(said, dict) or said.get("run_id") != match.group(2):
            continue
        said.update(uid=info.st_uid, account=account_name(info.st_uid), written=info.st_mtime)
        entries.append(said)
    running = _processes_by_uid({entry["uid"] for entry in entries})
    alive = []
    for entry in entries:
        if any(names_run(command, entry["run_id"]) for command in running[entry["uid"]]):
            entry["state"] = "running"
        elif now - entry["written"] < STARTING_FOR:
            entry["state"] = "starting"
        else:
            continue
        alive.append(entry)
    return alive


def others_alive(board: str = BOARD, uid: int | None = None) -> list[dict]:
    """The alive entries of accounts other than `uid` (this process's by default)."""
    uid = os.geteuid() if uid is None else uid
    return [entry for entry in read_entries(board) if entry["uid"] != uid]


def announce(entry: dict, board: str = BOARD) -> bool:
    """Write this account's entry for a run (run_id, head, nodes, world_size, started), whole
    (written beside, then renamed); False where the node has no board (setup older than it)."""
    if not os.path.isdir(board):
        return False
    uid = os.geteuid()
    path = entry_path(board, uid, entry["run_id"])
    partial = f"{path}.{os.getpid()}.new"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, json.dumps(entry, sort_keys=True).encode())
    finally:
        os.close(fd)
    os.rename(partial, path)
    return True


def withdraw(run_id: str, board: str = BOARD) -> None:
    """Remove this account's entry for the run, if any."""
    try:
        os.unlink(entry_path(board, os.geteuid(), run_id))
    except OSError:
        pass


def sweep_own(board: str = BOARD, now: float | None = None) -> None:
    """Remove this account's entries that no longer count (their run gone) and are more than
    SWEPT_AFTER old: a dead entry costs nothing but its few bytes meanwhile."""
    uid, now = os.geteuid(), time.time() if now is None else now
    alive = {entry["run_id"] for entry in read_entries(board, now) if entry["uid"] == uid}
    try:
        names = os.listdir(board)
    except OSError:
        return
    for name in names:
        match = _ENTRY.match(name)
        if not match or int(match.group(1)) != uid or match.group(2) in alive:
            continue
        try:
            old = now - os.lstat(os.path.join(board, name)).st_mtime > SWEPT_AFTER
        except OSError:
            continue
        if old:
            withdraw(match.group(2), board)
