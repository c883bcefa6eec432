"""What a launch needs to know of each node, and the files it puts there.

The launch module runs on the head. It calls these functions there, and runs this same file on
every other node over the cluster's own ssh (`python -c <board.py and this file>`, see
ssh_to_nodes.program; the request as JSON on stdin), in parallel, the way mpirun reaches the nodes a
moment later. So this file imports only the standard library and the board, nothing of Ansible.
"""

from __future__ import annotations

import base64
import errno
import glob
import hashlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from .board import BoardFull, announce, in_the_way, others_alive, own_entry, sweep_own, withdraw
from .stacks import take

RUN_ID_VAR = "TORCHFLEET_RUN_ID"
# Set (to the run id) in the environment of a run's supervisor on the head, beside RUN_ID_VAR.
SUPERVISOR_VAR = "TORCHFLEET_SUPERVISOR"


def unmarked_env() -> dict:
    """This process's environment without a run's marks: for what it starts that is not the run
    (an ssh and the master it may leave behind), so that only the run's own processes carry them."""
    return {name: value for name, value in os.environ.items() if name not in (RUN_ID_VAR, SUPERVISOR_VAR)}


def file_sha1(path: str) -> str | None:
    """SHA-1 of a file's content, read in blocks; None when it cannot be read (missing, say)."""
    digest = hashlib.sha1()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def env_value(environ_bytes: bytes, name: str = RUN_ID_VAR) -> str | None:
    """A variable (TORCHFLEET_RUN_ID by default) from the raw bytes of /proc/PID/environ."""
    prefix = name.encode() + b"="
    for item in environ_bytes.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("utf-8", "replace")
    return None


def cmdline(pid, limit: int) -> str:
    argv = read_bytes(f"/proc/{pid}/cmdline").rstrip(b"\0").split(b"\0")
    text = shlex.join(arg.decode("utf-8", "replace") for arg in argv)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# The rendezvous port: the launch checks it on the head, the doctor on the head too (its probe
# runs this file's text for it), so both judge a port alike.
def listening_inodes(proc_net_tcp: str, port: int) -> set[int]:
    """Socket inodes bound to `port` (listening or bound, not connections) in the text of
    /proc/net/tcp or /proc/net/tcp6."""
    inodes = set()
    for line in proc_net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or ":" not in fields[1]:
            continue
        # 0A is LISTEN, 07 a bound socket not (yet) listening; both block the port.
        if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] in ("0A", "07"):
            inode = int(fields[9])
            if inode:
                inodes.add(inode)
    return inodes


def port_in_use(port: int) -> bool:
    """Try to bind the port as the rendezvous store will (any address, IPv4 and IPv6)."""
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this node
        with sock:
            # SO_REUSEADDR: a previous run's connections in TIME_WAIT do not block the store.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((address, port))
            except OSError as err:
                if err.errno == errno.EADDRINUSE:
                    return True
    return False


def port_holders(port: int) -> list[str]:
    """'pid 123 (python3 -m http.server)' for the processes we can see holding the port."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            inodes |= listening_inodes(read_bytes(table).decode(), port)
        except OSError:
            pass
    wanted = {f"socket:[{inode}]" for inode in inodes}
    holders = []
    for entry in os.listdir("/proc") if wanted else ():
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
            if any(os.readlink(f"/proc/{entry}/fd/{fd}") in wanted for fd in fds):
                holders.append(f"pid {entry} ({cmdline(entry, 120)})")
        except OSError:
            continue
    return holders


def _ancestors() -> set[int]:
    """This process and its ancestors: never stop the module (or whoever started it)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = int(read_bytes(f"/proc/{pid}/stat").rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


# Open MPI's daemon carries no TORCHFLEET_RUN_ID, but its command line names the run's per-rank
# log directory (RUNS/RUN_ID/ranks): a daemon whose mpirun died before telling it to go is found
# by that, and ended with the rest of its run.
_DAEMON_RUN = re.compile(rb"orte_output_filename\x00[^\x00]*/([A-Za-z0-9_.-]{1,64})/ranks\x00")


def daemon_run_id(cmdline_bytes: bytes) -> str | None:
    """The run of an Open MPI daemon (orted), from its command line; None for anything else."""
    argv0 = cmdline_bytes.split(b"\x00", 1)[0]
    if not argv0.endswith(b"orted"):
        return None
    found = _DAEMON_RUN.search(cmdline_bytes)
    return found.group(1).decode() if found else None


def find_run_processes(run_ids=None) -> list[dict]:
    """Processes on this node carrying TORCHFLEET_RUN_ID (only those in `run_ids` if given):
    this user's, or everyone's as root, in this PID namespace. Zombies have an empty environ,
    so a process that is dead but not yet reaped does not count."""
    skip = _ancestors()
    uid = os.geteuid()
    try:
        own_ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        own_ns = None
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        base = f"/proc/{entry}"
        try:
            if uid != 0 and os.stat(base).st_uid != uid:
                continue
            # A container's processes are another node's business.
            if own_ns is not None and os.readlink(f"{base}/ns/pid") != own_ns:
                continue
            environ = read_bytes(f"{base}/environ")
            run_id = env_value(environ) or daemon_run_id(read_bytes(f"{base}/cmdline"))
            if run_id is None or (run_ids is not None and run_id not in run_ids):
                continue
            line = cmdline(entry, 300)
            pgid = os.getpgid(int(entry))
        except OSError:
            continue  # gone meanwhile, or not ours to read
        found.append({"pid": int(entry), "run_id": run_id, "cmdline": line, "pgid": pgid,
                      "supervisor": env_value(environ, SUPERVISOR_VAR) is not None})
    return sorted(found, key=lambda proc: proc["pid"])


def _signal(procs, signum) -> None:
    """Signal the process groups of `procs`; a process in our own group (or an odd one) alone."""
    own = os.getpgrp()
    groups = {proc["pgid"] for proc in procs if proc["pgid"] > 1 and proc["pgid"] != own}
    targets = [(os.killpg, pgid) for pgid in sorted(groups)]
    targets += [(os.kill, proc["pid"]) for proc in procs if proc["pgid"] not in groups]
    for send, target in targets:
        try:
            send(target, signum)
        except OSError:
            pass  # already gone


def _wait_gone(run_ids, seconds: float, spare_supervisor: bool = False) -> list[dict]:
    deadline = time.monotonic() + seconds
    while True:
        alive = [proc for proc in find_run_processes(run_ids) if not (spare_supervisor and proc["supervisor"])]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.2)


def stop_processes(procs, grace: float, spare_supervisor: bool = False) -> list[dict]:
    """TERM the runs' process groups, give them `grace` seconds, KILL what is left; return what
    survived even that. Each round rescans by run id: Open MPI and torchrun put every rank and
    worker in a process group of its own, so groups alone do not reach all of a run. With
    `spare_supervisor`, the processes with the supervisor's mark (its guardian) are left alone
    in every round, not only the first."""
    run_ids = {proc["run_id"] for proc in procs}
    _signal(procs, signal.SIGTERM)
    alive = _wait_gone(run_ids, grace, spare_supervisor)
    if alive:
        _signal(alive, signal.SIGKILL)
        alive = _wait_gone(run_ids, 10, spare_supervisor)  # SIGKILL is not refused, but teardown takes a moment
    return alive


def end_run(run_id: str, grace: float, spare_guardian: bool = False) -> tuple[list[dict], list[dict]]:
    """End what is left of one run on this node: (what was found and stopped, what survived).
    `spare_guardian`: the supervisor's own call; its guardian (the one other process with the
    supervisor's mark) must outlive it, or a supervisor killed later would leave its run alone."""
    procs = [proc for proc in find_run_processes({run_id})
             if not (spare_guardian and proc["supervisor"])]
    return procs, stop_processes(procs, grace, spare_guardian) if procs else []


def interface_addresses() -> dict | None:
    """{interface name: [its IPv4 addresses]}, from `ip -4 -o addr show`; an interface without
    one is listed from /sys/class/net with []. None where `ip` cannot be run."""
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True,
                             check=False).stdout
    except OSError:
        return None
    try:
        found: dict[str, list[str]] = {name: [] for name in sorted(os.listdir("/sys/class/net"))}
    except OSError:
        found = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet":
            found.setdefault(fields[1].split("@")[0], []).append(fields[3].split("/")[0])
    return found


def ipv4_interfaces() -> dict:
    """{interface name: its first IPv4 address} ({} without ip)."""
    return {name: addresses[0] for name, addresses in (interface_addresses() or {}).items() if addresses}


def _connect(probe: dict, own: set, timeout: float, results: dict) -> None:
    key = probe["key"]
    if probe["target"] in own:
        results[key] = {"ok": False, "error": "the target address is this node's own"}
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        if probe.get("interface") and os.geteuid() == 0:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, probe["interface"].encode())
            except OSError:
                pass  # the bound source address still picks the interface
        sock.bind((probe["source"], 0))
        sock.connect((probe["target"], int(probe.get("port", 22))))
        results[key] = {"ok": True, "error": ""}
    except OSError as err:
        results[key] = {"ok": False, "error": err.strerror or str(err)}
    finally:
        sock.close()


def connect_all(probes: list, own_addresses, timeout: float) -> dict:
    """{key: {ok, error}}: a TCP connect for each probe ({key, interface, source, target, port}),
    bound to its source address (and interface, as root), all at once."""
    results: dict = {}
    threads = [threading.Thread(target=_connect, args=(probe, set(own_addresses), timeout, results))
               for probe in probes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def files_to_place(file_contents: dict) -> tuple[dict, dict]:
    """({absolute path: base64 content}, {absolute path: sha1 of the bytes}) of the files a run
    needs on every node, from {path or ~/path: base64 content}; ValueError names a bad entry."""
    files, digests = {}, {}
    for path, content in file_contents.items():
        where = os.path.expanduser(path)
        if not os.path.isabs(where):
            raise ValueError(f"{path} is not an absolute path (or ~/...); the nodes would each read "
                             f"it from another directory")
        try:
            digests[where] = hashlib.sha1(base64.b64decode(content, validate=True)).hexdigest()
        except (TypeError, ValueError):
            raise ValueError(f"the content given for {path} is not base64; encode it with the "
                             f"torchfleet.cluster.file_b64 filter") from None
        files[where] = content
    return files, digests


def write_file(path: str, content: bytes) -> None:
    """Whole or not at all: a rank never reads half a script. Directories 0750, files 0640, as
    the training account's own."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o750, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=directory, prefix=".torchfleet-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(content)
        os.chmod(partial, 0o640)
        os.replace(partial, path)
    except BaseException:
        os.unlink(partial)
        raise


def read_end(path: str, limit: int = 4 * 1024 * 1024) -> str:
    """The end of a log that may be many gigabytes: torchrun and Open MPI print their failure
    reports last. Empty when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


TAIL_LINE_CHARS = 2000  # of a line quoted in a record or a report: a 1 MiB line is clipped


def clipped(lines) -> list[str]:
    """The lines, each cut to TAIL_LINE_CHARS, saying how much was left out: what a record
    quotes stays small (Ansible carries it in one event), whatever the ranks print."""
    return [line if len(line) <= TAIL_LINE_CHARS else
            f"{line[:TAIL_LINE_CHARS]}... ({len(line) - TAIL_LINE_CHARS} characters more)" for line in lines]


def last_lines(text: str, lines: int) -> list[str]:
    """The last `lines` lines of a rank's output, each as it was left: a line redrawn with "\r"
    (a progress bar) as its last redraw, never as a line per redraw."""
    found = text.split("\n")
    if found and not found[-1]:
        found.pop()
    return [line.rstrip("\r").rpartition("\r")[2] for line in found[-lines:]]


def log_tail(pattern: str, lines: int) -> dict:
    """The last `lines` lines of the file `pattern` names here (the latest torchrun attempt
    sorts last), clipped, and its resolved path; path None when there is no such file."""
    matches = sorted(glob.glob(pattern))
    if not matches:
        return {"path": None, "lines": []}
    return {"path": matches[-1], "lines": clipped(last_lines(read_end(matches[-1], 256 * 1024), lines))}


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


def board_answer(entry: dict | None, share: bool) -> dict:
    """Announce `entry` (none in check mode), then read the others: {announced, others}, the
    others being those this launch must yield to (board.in_the_way), its entry withdrawn then,
    unless `share`; or {board_full: why}."""
    if not entry:
        return {"announced": None, "others": others_alive()}
    sweep_own()
    try:
        announced = announce(entry)
    except BoardFull as full:
        return {"announced": None, "others": [], "board_full": str(full)}
    others = others_alive()
    mine = own_entry(entry["run_id"]) if announced else None
    if mine is None:
        return {"announced": announced, "others": others}
    blocking = in_the_way(others, mine)
    if blocking and not share:
        withdraw(entry["run_id"])
        return {"announced": None, "others": blocking}
    return {"announced": True, "others": blocking}


def probe(request: dict) -> dict:
    """One node's answer. With `write` ({path: base64 content}), writes those files and names
    them; with `expect` ({path: SHA-1}), the runs alive on the node and which of those files are
    missing or differ; with `stop` ({run_id, grace}), ends what is left of that run here and
    names what was stopped and what survived; with `tail` ({pattern, lines}), the end of that log;
    with `packages` ({python, expect}), how that environment differs from what setup installed;
    with `interfaces` (true), the node's interfaces and their IPv4 addresses; with `board`
    ({entry, share}), other accounts' runs alive here (`others`), and this run's entry written
    unless there are some and `share` is false (`announced`: false where the node has no board);
    with `withdraw` (a run id), this account's entry for it removed; with `stacks` ({run_id,
    run_dir, attempt}), the Python stacks of that attempt's ranks here (stacks.take).
    An empty request only shows that the node answers."""
    answer = {}
    if "board" in request:
        answer.update(board_answer(**request["board"]))
    if "withdraw" in request:
        withdraw(request["withdraw"])
    if "write" in request:
        for path, content in sorted(request["write"].items()):
            write_file(path, base64.b64decode(content))
        answer["written"] = sorted(request["write"])
    if "expect" in request:
        answer["runs"] = find_run_processes()
        answer["stale"] = sorted(path for path, sha1 in request["expect"].items()
                                 if file_sha1(path) != sha1)
    if "stop" in request:
        answer["stopped"], answer["survivors"] = end_run(request["stop"]["run_id"], request["stop"]["grace"])
    if "tail" in request:
        answer["tail"] = log_tail(request["tail"]["pattern"], request["tail"]["lines"])
    if "packages" in request:
        answer["drift"] = environment_drift(request["packages"]["python"], request["packages"]["expect"])
    if request.get("interfaces"):
        answer["interfaces"] = interface_addresses()
    if "stacks" in request:
        answer["stacks"] = take(**request["stacks"])
    return answer


def main() -> None:
    try:
        answer = probe(json.load(sys.stdin))
    except (OSError, ValueError) as err:
        answer = {"error": f"{type(err).__name__}: {err}"}
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
