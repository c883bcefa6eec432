"""A node's files and processes read from this machine, through /proc, instead of `docker exec`.

The cluster tests poll the nodes for a run's record, its checkpoint and its processes a few
thousand times a session; every `docker exec` has runc start a process in the container, and those
add up to CPU the tests themselves lack on a busy machine (docs/performance.md has the figures).
A node's first process (`docker inspect`'s .State.Pid) gives its filesystem (/proc/PID/root), and
its cgroup lists the node's processes. A pid is used only while its cgroup still names the node's
container: a node stopped, restarted or replaced under a test is looked up again, never read
through a pid that now belongs to something else.

What the helpers answer for a node that is not running mirrors `docker exec`'s failure as the
tests read it: no text, no file, no process."""

import os
import re
import subprocess
from pathlib import Path

_containers = {}  # node name -> (container id, pid of its first process), as last looked up


def _cgroup(pid):
    try:
        return Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8")
    except OSError:
        return ""


def _looked_up(node):
    found = subprocess.run(["docker", "inspect", "-f", "{{.Id}} {{.State.Pid}}", node],
                           capture_output=True, text=True, timeout=60, check=False)
    if found.returncode != 0:
        return None
    container, pid = found.stdout.split()
    return (container, int(pid)) if int(pid) else None  # 0: not running


def _first_process(node):
    """(container id, pid) of a running node, or None."""
    known = _containers.get(node)
    if known is None or known[0] not in _cgroup(known[1]):
        known = _looked_up(node)
        if known is None:
            _containers.pop(node, None)
            return None
        _containers[node] = known
    return known


def _through_root(node, read):
    """read(root, (container id, pid)) on the node's filesystem as this machine sees it; None if
    the node is not running. What was read while the pid went under it (an error, or a file or
    process missing because the node's root was gone) is no answer about the node: it is read
    once more, looked up again."""
    for _attempt in range(2):
        known = _first_process(node)
        if known is None:
            return None
        try:
            answer = read(Path(f"/proc/{known[1]}/root"), known)
        except OSError:
            if known[0] in _cgroup(known[1]):
                raise
            continue
        if known[0] in _cgroup(known[1]):
            return answer
    return None


def read_text(node, path):
    """The file's text; "" if it or the node is not there (as `docker exec NODE cat` gives)."""
    def text(root, _known):
        try:
            return (root / path.lstrip("/")).read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, NotADirectoryError):
            return ""
    return _through_root(node, text) or ""


def is_file(node, path):
    """Whether the file is there (`docker exec NODE test -f`)."""
    def there(root, _known):
        return (root / path.lstrip("/")).is_file()
    return bool(_through_root(node, there))


def contains(node, directory, text):
    """Whether a file under `directory` holds `text` (`docker exec NODE grep -rqs`)."""
    def found(root, _known):
        for folder, _dirs, files in os.walk(root / directory.lstrip("/")):
            for name in files:
                try:
                    if text in Path(folder, name).read_text(encoding="utf-8", errors="replace"):
                        return True
                except OSError:
                    continue  # gone, or not a regular file: grep -s says nothing of it either
        return False
    return bool(_through_root(node, found))


def _uid(root, user):
    for line in (root / "etc/passwd").read_text(encoding="utf-8").splitlines():
        fields = line.split(":")
        if fields[0] == user:
            return fields[2]
    raise LookupError(f"no user {user} in the node's /etc/passwd")


def _procs(container, pid):
    """Host pids of the container's processes, from the cgroup its first process is in."""
    for line in _cgroup(pid).splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if container not in path:
            continue
        candidates = ([f"/sys/fs/cgroup/pids{path}"] if "pids" in controllers.split(",") else
                      [f"/sys/fs/cgroup{path}", f"/sys/fs/cgroup/unified{path}"] if hierarchy == "0" else [])
        for folder in candidates:
            try:
                return Path(folder, "cgroup.procs").read_text(encoding="utf-8").split()
            except OSError:
                continue
    # No cgroup file to read: every process of this machine whose cgroup names the container.
    return [entry for entry in os.listdir("/proc") if entry.isdigit() and container in _cgroup(entry)]


def processes(node, user, pattern):
    """`docker exec NODE pgrep -u USER -a -f PATTERN`'s lines: `pid command`, the pid as the node
    numbers it, for the user's processes whose command line matches the (extended) regex."""
    matches = re.compile(pattern).search

    def listed(root, known):
        uid = _uid(root, user)
        lines = []
        for host_pid in _procs(*known):
            try:
                status = Path(f"/proc/{host_pid}/status").read_text(encoding="utf-8")
                argv = Path(f"/proc/{host_pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
            except OSError:
                continue  # ended meanwhile
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            if fields["Uid"].split()[1] != uid:
                continue
            # pgrep matches a process without a command line (a zombie) by its name.
            command = b" ".join(argv).decode(errors="replace") or fields["Name"].strip()
            if matches(command):
                lines.append((int(fields["NSpid"].split()[-1]), command))
        return [f"{pid} {command}" for pid, command in sorted(lines)]
    return _through_root(node, listed) or []
