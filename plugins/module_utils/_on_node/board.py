"""The run board: where each node's runs announce themselves to every account of the cluster.

Setup makes BOARD on every node, root's, mode 1777 like /tmp: every training account may write
there, and the sticky bit keeps each from removing or renaming another's entry. A launch writes
one entry per node of its run (`UID.RUN_ID.json`: the run, its head, nodes, world size and start)
before it starts anything, so that another account's launch onto those nodes is refused, naming
it, whatever port it picks. An entry's owner is the file's owner, never what it says: one whose
name's UID is not its owner is ignored, so no account can speak for another.

An entry is alive while a process of its owner names the run on its command line (the
supervisor's run directory, torchrun's --rdzv-id and --log-dir, Open MPI's daemons), or for
STARTING_FOR seconds after it was written (the start in between). When it was written is the
file's ctime, which its owner cannot set (`touch -d` sets the mtime, and moves the ctime to now);
a time ahead of the clock counts as none. So an entry that nobody removed (a run ended, a node
rebooted, a launch killed, an entry forged) stops counting by itself; its account's launches
remove it a day later (sweep_own), and a launch refused removes its own at once. Ranks' own
command lines do not name the run: a node counts as busy through its torchrun or launcher.

Two launches at once: each announces, then reads the others (the probe), and yields to a run
alive before its own entry (running, or announced earlier: the older ctime, the lower UID on a
tie), withdrawing its entry. Of two launches on one node, one goes on. The board is bounded: an
account's entries beyond PER_ACCOUNT are not read, and a launch of an account with that many is
refused, naming them (docs/security.md).

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
PER_ACCOUNT = 64  # entries of one account read on a node; a launch is refused beyond it
SKEW = 5  # seconds a node's clock may step back under an entry before its time counts as ahead
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


def read_entries(board: str | None = None, now: float | None = None) -> list[dict]:
    """Every entry of the board that is its owner's and alive, with `account`, `uid` and `state`
    (running: a process of its owner names the run; starting: written less than STARTING_FOR s
    ago, none yet). Dead entries are left (only their owner may remove them)."""
    board, now = board or BOARD, time.time() if now is None else now
    try:
        names = os.listdir(board)
    except OSError:
        return []
    entries: list[dict] = []
    counted: dict[str, int] = {}
    for name in sorted(names):
        match = _ENTRY.match(name)
        if not match:
            continue
        counted[match.group(1)] = counted.get(match.group(1), 0) + 1
        if counted[match.group(1)] > PER_ACCOUNT:  # a flood: read no further of that account
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
        said.update(uid=info.st_uid, account=account_name(info.st_uid), written=info.st_ctime,
                    written_ns=info.st_ctime_ns)
        entries.append(said)
    running = _processes_by_uid({entry["uid"] for entry in entries})
    alive = []
    for entry in entries:
        if any(names_run(command, entry["run_id"]) for command in running[entry["uid"]]):
            entry["state"] = "running"
        elif -SKEW <= now - entry["written"] < STARTING_FOR:
            entry["state"] = "starting"
        else:
            continue
        alive.append(entry)
    return alive


def others_alive(board: str | None = None, uid: int | None = None) -> list[dict]:
    """The alive entries of accounts other than `uid` (this process's by default)."""
    uid = os.geteuid() if uid is None else uid
    return [entry for entry in read_entries(board) if entry["uid"] != uid]


class BoardFull(Exception):
    """This account has PER_ACCOUNT entries on the node's board already."""


def in_the_way(others: list, mine: os.stat_result) -> list:
    """Of other accounts' alive entries, those a launch whose own entry is `mine` yields to:
    running, or announced before it (the older ctime; on a tie, the lower UID)."""
    return [entry for entry in others if entry["state"] == "running"
            or (entry["written_ns"], entry["uid"]) < (mine.st_ctime_ns, mine.st_uid)]


def own_entry(run_id: str, board: str | None = None) -> os.stat_result | None:
    try:
        return os.lstat(entry_path(board or BOARD, os.geteuid(), run_id))
    except OSError:
        return None


def announce(entry: dict, board: str | None = None) -> bool:
    """Write this account's entry for a run (run_id, head, nodes, world_size, started), whole
    (written beside, then renamed); False where the node has no board (setup older than it).
    BoardFull where the account has PER_ACCOUNT entries there already."""
    board = board or BOARD
    if not os.path.isdir(board):
        return False
    uid = os.geteuid()
    mine = [name for name in os.listdir(board) if name.startswith(f"{uid}.") and _ENTRY.match(name)]
    if len(mine) >= PER_ACCOUNT and f"{uid}.{entry['run_id']}.json" not in mine:
        raise BoardFull(f"the run board {board} holds {len(mine)} entries of {account_name(uid)} already, "
                        f"the most one account may have: stop or wait for its runs there (torchfleet runs), "
                        f"and remove entries of runs long gone (rm {board}/{uid}.*.json for runs that ended)")
    path = entry_path(board, uid, entry["run_id"])
    partial = f"{path}.{os.getpid()}.new"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, json.dumps(entry, sort_keys=True).encode())
    finally:
        os.close(fd)
    os.rename(partial, path)
    return True


def withdraw(run_id: str, board: str | None = None) -> None:
    """Remove this account's entry for the run, if any."""
    try:
        os.unlink(entry_path(board or BOARD, os.geteuid(), run_id))
    except OSError:
        pass


def sweep_own(board: str | None = None, now: float | None = None) -> None:
    """Remove this account's entries that no longer count (their run gone) and are more than
    SWEPT_AFTER old: a dead entry costs nothing but its few bytes meanwhile."""
    board, uid, now = board or BOARD, os.geteuid(), time.time() if now is None else now
    try:
        names = os.listdir(board)
    except OSError:
        return
    old = []
    for name in names:
        match = _ENTRY.match(name)
        if not match or int(match.group(1)) != uid:
            continue
        try:  # its own entry: the mtime it wrote is good enough
            if now - os.lstat(os.path.join(board, name)).st_mtime > SWEPT_AFTER:
                old.append(match.group(2))
        except OSError:
            continue
    if old:
        commands = _processes_by_uid({uid})[uid]
        for run_id in old:
            if not any(names_run(command, run_id) for command in commands):
                withdraw(run_id, board)
