"""The run board: where each node's runs announce themselves to every account of the cluster.

Setup makes BOARD on every node, root's, mode 1777 like /tmp: every training account may write
there, and the sticky bit keeps each from removing or renaming another's entry. A launch writes
one entry per node of its run (`UID.RUN_ID.json`: the run, its head, nodes, world size and start)
before it starts anything, so that another account's launch onto those nodes is refused, naming
it, whatever port it picks. An entry's owner is the file's owner, never what it says: one whose
name's UID is not its owner is skipped and named, so no account can speak for another, and each
account's entries are counted by owner.

An entry is alive while a process of its owner names the run on its command line (the
supervisor's run directory, torchrun's --rdzv-id and --log-dir, Open MPI's daemons), or for
STARTING_FOR seconds after it was written (the start in between). When it was written is the
file's birth time (statx), which its owner can neither set nor refresh (`touch -d` sets the
mtime, `chmod` moves the ctime to now); the ctime stands in only where the file system keeps no
birth time. A time ahead of the clock counts as none. So an entry that nobody removed (a run
ended, a node rebooted, a launch killed, an entry forged) stops counting by itself; its account's
launches remove it a day later (sweep_own), and a launch refused removes its own at once. Ranks'
own command lines do not name the run: a node counts as busy through its torchrun or launcher.

An entry is read within ENTRY_BYTES and DEPTH: one that is not JSON of that shape is skipped, and
the launch names it in one line (`skipped`), never as a refusal.

Two launches at once: each announces, then reads the others (the probe), and yields to a run
alive before its own entry (running, or announced earlier: the older ctime, the lower UID on a
tie), withdrawing its entry. Of two launches on one node, one goes on. The board is bounded: an
account's entries beyond PER_ACCOUNT are not read, and a launch of an account with that many is
refused, naming them (docs/security.md).

The probe runs this file on every node (see ssh_to_nodes.probe_command); the standard library only.
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import re
import secrets
import struct
import time

BOARD = "/var/lib/torchfleet/board"
STARTING_FOR = 180  # seconds an entry counts with no process of its run yet: the launch's start
SWEPT_AFTER = 86400  # seconds after which this account's next launch removes its dead entries
ENTRY_BYTES = 1 << 16  # an entry longer than this is not ours
PER_ACCOUNT = 64  # entries of one account read on a node; a launch is refused beyond it
SKEW = 5  # seconds a node's clock may step back under an entry before its time counts as ahead
DEPTH = 4  # nesting of an entry's JSON: {"nodes": [...]} is 2
# UID.RUN_ID.json, or UID.RUN_ID~TOKEN.json where another account took the plain name first.
_ENTRY = re.compile(r"^(\d+)\.([A-Za-z0-9_.-]+?)(?:~[0-9a-f]{16})?\.json$")
_NEW_TRIES = 8  # unpredictable names for an entry written beside, each created exclusively


def entry_path(board: str, uid: int, run_id: str) -> str:
    return os.path.join(board, f"{uid}.{run_id}.json")


def _owned(board: str, uid: int) -> list[str]:
    """The board's entries this account owns (regular files, not links), whatever their names."""
    try:
        names = os.listdir(board)
    except OSError:
        return []
    found = []
    for name in sorted(names):
        if not _ENTRY.match(name):
            continue
        try:
            info = os.lstat(os.path.join(board, name))
        except OSError:
            continue
        if info.st_uid == uid and info.st_mode & 0o170000 == 0o100000:
            found.append(name)
    return found


def _named_for(names: list[str], uid: int, run_id: str) -> list[str]:
    """Of `names`, those of `uid`'s entry for the run (its plain name, or one beside it)."""
    return [name for name in names if (match := _ENTRY.match(name))
            and int(match.group(1)) == uid and match.group(2) == run_id]


def _own_names(board: str, uid: int, run_id: str) -> list[str]:
    """The board's names of this account's entry for the run (owned by it, not links)."""
    return _named_for(_owned(board, uid), uid, run_id)


_STATX_BTIME, _AT_EMPTY_PATH, _AT_SYMLINK_NOFOLLOW = 0x800, 0x1000, 0x100


def _libc_statx():
    try:
        return ctypes.CDLL(None, use_errno=True).statx
    except (AttributeError, OSError):  # a C library older than statx (glibc 2.28)
        return None


_statx = _libc_statx()


def written_ns(fd: int, info: os.stat_result) -> int:
    """When the open file was made, in ns: its birth time, which no account can set or refresh;
    its ctime where the file system keeps none."""
    if _statx is not None:
        buffer = ctypes.create_string_buffer(256)  # struct statx
        if _statx(fd, b"", _AT_EMPTY_PATH | _AT_SYMLINK_NOFOLLOW, _STATX_BTIME, buffer) == 0 \
                and struct.unpack_from("I", buffer, 0)[0] & _STATX_BTIME:
            seconds, nanoseconds = struct.unpack_from("qI", buffer, 80)  # stx_btime
            return seconds * 1_000_000_000 + nanoseconds
    return info.st_ctime_ns


def _nesting(text: str) -> int:
    """The deepest nesting of brackets in JSON text, strings left out: checked before json.loads,
    whose recursion a few thousand brackets exhaust."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def parse_entry(data: bytes) -> dict:
    """An entry's JSON, within ENTRY_BYTES and DEPTH; ValueError naming what is wrong."""
    if len(data) > ENTRY_BYTES:
        raise ValueError(f"longer than {ENTRY_BYTES} bytes")
    text = data.decode("utf-8", "replace")
    if _nesting(text) > DEPTH:
        raise ValueError(f"JSON nested deeper than {DEPTH}")
    said = json.loads(text)
    if not isinstance(said, dict):
        raise ValueError("not a JSON object")
    return said


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


def read_entries(board: str | None = None, now: float | None = None, skipped: list | None = None) -> list[dict]:
    """Every entry of the board that is its owner's and alive, with `account`, `uid` and `state`
    (running: a process of its owner names the run; starting: written less than STARTING_FOR s
    ago, none yet). Dead entries are left (only their owner may remove them). Entries that are not
    their owner's, not readable as one, or of an account beyond PER_ACCOUNT are added to `skipped`
    as (owner's uid, why, name): see skipped_phrases."""
    board, now = board or BOARD, time.time() if now is None else now
    skipped = [] if skipped is None else skipped
    try:
        names = os.listdir(board)
    except OSError:
        return []
    entries: list[dict] = []
    counted: dict[int, int] = {}
    for name in sorted(names):
        match = _ENTRY.match(name)
        if not match:
            continue
        path = os.path.join(board, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue  # a link, or gone meanwhile
        try:
            info = os.fstat(fd)
            if info.st_mode & 0o170000 != 0o100000:
                continue
            counted[info.st_uid] = counted.get(info.st_uid, 0) + 1  # by its owner, never its name
            if counted[info.st_uid] > PER_ACCOUNT:  # a flood: read no further of that account
                continue
            if info.st_uid != int(match.group(1)):
                skipped.append((info.st_uid, "its name speaks for another account", name))
                continue
            said = parse_entry(os.read(fd, ENTRY_BYTES + 1))
            written = written_ns(fd, info)
        except OSError:
            continue
        except (ValueError, RecursionError) as error:
            skipped.append((info.st_uid, f"not an entry: {str(error)[:80]}", name))
            continue
        finally:
            os.close(fd)
        if said.get("run_id") != match.group(2):
            skipped.append((info.st_uid, "it names another run than its file name", name))
            continue
        said.update(uid=info.st_uid, account=account_name(info.st_uid), written=written / 1e9,
                    written_ns=written)
        entries.append(said)
    skipped.extend((uid, f"beyond the {PER_ACCOUNT} read of one account", f"{count - PER_ACCOUNT} more")
                   for uid, count in sorted(counted.items()) if count > PER_ACCOUNT)
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


def skipped_phrases(skipped: list) -> list[str]:
    """What read_entries skipped, one phrase per owner and cause, naming a few of the files."""
    grouped: dict = {}
    for uid, why, name in skipped:
        grouped.setdefault((uid, why), []).append(name)
    return [f"{len(names)} of {account_name(uid)} ({why}: {', '.join(names[:2])}{', ...' if len(names) > 2 else ''})"
            for (uid, why), names in sorted(grouped.items())]


def others_alive(board: str | None = None, uid: int | None = None, skipped: list | None = None) -> list[dict]:
    """The alive entries of accounts other than `uid` (this process's by default)."""
    uid = os.geteuid() if uid is None else uid
    return [entry for entry in read_entries(board, skipped=skipped) if entry["uid"] != uid]


class BoardFull(Exception):
    """This account has PER_ACCOUNT entries on the node's board already."""


def in_the_way(others: list, mine: tuple) -> list:
    """Of other accounts' alive entries, those a launch whose own entry is `mine` (written_ns,
    uid) yields to: running, or announced before it (the older; on a tie, the lower UID)."""
    return [entry for entry in others if entry["state"] == "running"
            or (entry["written_ns"], entry["uid"]) < mine]


def own_entry(run_id: str, board: str | None = None) -> tuple | None:
    """(written_ns, uid) of this account's entry for the run, None where it has none."""
    board, uid = board or BOARD, os.geteuid()
    for name in _own_names(board, uid, run_id):
        try:
            fd = os.open(os.path.join(board, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            return written_ns(fd, os.fstat(fd)), uid
        finally:
            os.close(fd)
    return None


def announce(entry: dict, board: str | None = None) -> bool:
    """Write this account's entry for a run (run_id, head, nodes, world_size, started), whole
    (written beside under a name nobody can guess, then renamed); False where the node has no
    board (setup older than it). BoardFull where the account owns PER_ACCOUNT entries there
    already."""
    board = board or BOARD
    if not os.path.isdir(board):
        return False
    uid, run_id = os.geteuid(), entry["run_id"]
    mine = _owned(board, uid)  # one listing: the count, and this run's names among them
    ours = _named_for(mine, uid, run_id)
    if len(mine) >= PER_ACCOUNT and not ours:
        raise BoardFull(f"the run board {board} holds {len(mine)} entries of {account_name(uid)} already, "
                        f"the most one account may have: stop or wait for its runs there (torchfleet runs), "
                        f"and remove its entries of runs long gone (they are this account's own: "
                        f"{', '.join(mine[:3])}{' ...' if len(mine) > 3 else ''} in {board})")
    data = json.dumps(entry, sort_keys=True).encode()
    for _try in range(_NEW_TRIES):
        partial = os.path.join(board, f".{uid}.{secrets.token_hex(16)}.new")
        try:
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            break
        except FileExistsError:
            continue
    else:
        raise OSError(f"could not make a new entry in {board} under {_NEW_TRIES} fresh names")
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    # Its own name, or, where another account holds that name (the sticky bit keeps us from
    # replacing its file), a name of its own beside it.
    targets = [os.path.join(board, name) for name in ours] or [entry_path(board, uid, run_id)]
    targets.append(os.path.join(board, f"{uid}.{run_id}~{secrets.token_hex(8)}.json"))
    for target in targets:
        try:
            os.rename(partial, target)
            return True
        except OSError:  # EPERM under the sticky bit, EISDIR for a directory of that name
            continue
    os.unlink(partial)
    raise OSError(f"could not write the run board entry of {run_id} in {board}")


def withdraw(run_id: str, board: str | None = None) -> None:
    """Remove this account's entry for the run, if any."""
    board = board or BOARD
    for name in _own_names(board, os.geteuid(), run_id):
        try:
            os.unlink(os.path.join(board, name))
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
            info = os.lstat(os.path.join(board, name))
            if info.st_uid == uid and now - info.st_mtime > SWEPT_AFTER:
                old.append(match.group(2))
        except OSError:
            continue
    if old:
        commands = _processes_by_uid({uid})[uid]
        for run_id in old:
            if not any(names_run(command, run_id) for command in commands):
                withdraw(run_id, board)
