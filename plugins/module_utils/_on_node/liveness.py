"""Whether each node of an attempt is alive: death, proven at once, told from silence, tolerated.

The head keeps one ssh session open to every other node, running a beat there: the node's boot
id, then a byte every BEAT_EVERY seconds. What the session does says what became of the node:
- beats arrive: alive, however loaded the node is (the beat is one write a second);
- the session closes (the peer's processes died: killed, OOM, crashed, rebooted, so its kernel
  closed the connection) and the node does not take a new session with the same boot id at
  once: dead, proven. The attempt is ended now, not after a tolerance;
- no beat for SILENT_AFTER seconds (several beats missed, not one slow one): silent. Paused,
  cut off, powered off, or a network blip: mpirun and torchrun simply wait, and so does the run.
  Silent for `tolerance` seconds (heartbeat_timeout): lost, and the attempt is ended.

A knock on a TCP port (node_answers) tells whether a node's kernel answers at all, without a
session: the confirmation of a death, and the restarts' first look at a node.
"""

from __future__ import annotations

import enum
import functools
import os
import shlex
import signal
import socket
import subprocess
import threading
import time

from .processes import unmarked_env
from .progress import SCAN
from .report import now_iso

BEAT_EVERY = 1.0  # seconds between two beats of a node
SILENT_AFTER = 3.5  # seconds without a beat after which a node is silent (three beats missed)
CONFIRM_KNOCK = 0.5  # seconds a node whose session closed has to answer on its ssh port
REOPEN_WITHIN = 5.0  # seconds a node that answers has to begin a new session (a dead beat, not node)
RETRY_EVERY = 2.0  # seconds between two tries at a first session with a node
SSH_PORT = 22  # where `ssh -G` names none
# Seconds between two looks at the verdicts beyond which the supervisor itself was paused, and how
# long it then lets the beats waiting in its pipes be read (a beat a second comes in that time).
PAUSED_AFTER = 2.0
DRAIN = 1.5


@functools.lru_cache(maxsize=None)
def ssh_port(ssh: str, address: str) -> int:
    """The port the cluster's ssh reaches `address` on, as its configuration says (`ssh -G`, which
    connects nowhere): the knocks go there, not to 22 whatever the cluster uses."""
    try:
        said = subprocess.run([ssh, "-G", address], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return SSH_PORT
    for line in said.splitlines():
        key, _sep, value = line.partition(" ")
        if key == "port" and value.strip().isdigit():
            return int(value)
    return SSH_PORT


# Run on each node by its own interpreter (-S: the standard library alone), with the patterns of
# its ranks' files as arguments: a beat a line every BEAT_EVERY s, and the lines of the files that
# grew (progress.SCAN) as a thread of its own finds them, so a log file system that stalls (an NFS
# or Lustre metadata server) holds the scan, never the beat. It ends at its first write once the
# head closes the session.
BEAT = (
    "import sys, threading, time\n"
    + SCAN +
    "out = sys.stdout.buffer\n"
    "globs, sizes, lock = sys.argv[1:], {}, threading.Lock()\n"
    "with open('/proc/sys/kernel/random/boot_id', 'rb') as handle:\n"
    "    out.write(handle.read().strip() + b'\\n')\n"
    "out.flush()\n"
    "def said(line):\n"
    "    with lock:\n"
    "        out.write(line)\n"
    "def scanning():\n"
    "    while True:\n"
    f"        time.sleep({BEAT_EVERY})\n"
    "        scan(globs, sizes, said)\n"
    "threading.Thread(target=scanning, daemon=True).start()\n"
    "while True:\n"
    f"    time.sleep({BEAT_EVERY})\n"
    "    with lock:\n"
    "        out.write(b'.\\n')\n"
    "        out.flush()\n"
)


# The supervisor's environment, without the marks of a run's process.
BEAT_ENV = unmarked_env()


class NodeState(enum.Enum):
    """A node as the attempt sees it. DEAD and LOST end the attempt; SILENT is waited out."""
    ALIVE = "alive"
    SILENT = "silent"
    DEAD = "dead"
    LOST = "lost"


def node_answers(address: str, port: int, timeout: float = 3.0) -> bool:
    """Whether the node's kernel answers on the cluster network: a TCP connection, or a refusal
    (an answer too). No process starts on the node, so a node whose CPUs the training saturates
    still answers; one cut off, powered off or gone does not."""
    try:
        socket.create_connection((address, port), timeout=timeout).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return True


def wall_time(monotonic: float) -> str:
    """The head's clock (UTC, ISO 8601) at the time.monotonic() `monotonic`."""
    return now_iso(time.time() - (time.monotonic() - monotonic))


class Verdict:
    """What is known of one node: its state, since when (the head's clock), and why."""

    def __init__(self, state: NodeState, since: str | None = None, why: str = ""):
        self.state, self.since, self.why = state, since, why

    def cause(self, name: str, tolerance: int) -> str:
        """The node named as the end of an attempt, as the record and the report say it."""
        if self.state is NodeState.DEAD:
            return f"{name} died at {self.since} ({self.why})"
        return (f"{name} stopped answering at {self.since} (no beat from it for heartbeat_timeout, "
                f"{tolerance} s: cut off, powered off, crashed or hung)")


def judge(beat: float | None, now: float, tolerance: float, dead: tuple | None,
          watched: float | None = None) -> tuple[NodeState, float | None]:
    """A node's state from its last beat (monotonic; None: no session yet), `now`, the tolerance,
    and its proven death ((monotonic, why) or None); with the moment it began. A node whose first
    beat never comes (its session opens and hangs) is lost once the tolerance has passed since its
    watch began (`watched`), as a node that stopped beating is."""
    if dead is not None:
        return NodeState.DEAD, dead[0]
    if beat is None:
        if watched is not None and now - watched >= tolerance:
            return NodeState.LOST, watched
        return NodeState.ALIVE, None  # its session is starting: the launcher's own checks cover it
    quiet = now - beat
    if quiet >= tolerance:
        return NodeState.LOST, beat
    if quiet >= SILENT_AFTER:
        return NodeState.SILENT, beat
    return NodeState.ALIVE, None


def ending_of(verdicts: dict) -> dict:
    """{name: Verdict} of the nodes that end the attempt: dead, or silent past the tolerance."""
    return {name: verdict for name, verdict in verdicts.items() if verdict.state in (NodeState.DEAD, NodeState.LOST)}


def not_alive_of(verdicts: dict) -> dict:
    """{name: Verdict} of the nodes dead, lost or silent now."""
    return {name: verdict for name, verdict in verdicts.items() if verdict.state is not NodeState.ALIVE}


class NodeBeat:
    """The beat of one node: its ssh session and the thread that reads it."""

    def __init__(self, node, argv: list, stopped: threading.Event, progress=None):
        self.node, self.argv, self.stopped, self.progress = node, argv, stopped, progress
        self.boot: bytes | None = None
        self.watched = time.monotonic()  # when its watch began: the first beat is due from then
        self.beat: float | None = None  # monotonic time of the last beat
        self.dead: tuple | None = None  # (monotonic, why) once proven
        self.confirming = False
        self.proc: subprocess.Popen | None = None
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _session(self) -> subprocess.Popen | None:
        try:
            # Without the run's marks: no sweep of the run takes the beat for one of its processes.
            # It ends by itself with its reader (a write to a closed pipe), however the supervisor ends.
            proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, start_new_session=True, env=BEAT_ENV)
        except OSError:
            return None
        self.proc = proc
        if self.stopped.is_set():  # closed meanwhile: close() did not see this one
            self._end(proc)
            return None
        return proc

    @staticmethod
    def _end(proc) -> None:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()

    @staticmethod
    def _first_line(proc, within: float | None) -> bytes | None:
        """The session's first line (the boot id); None if it closed first, or not `within` s."""
        if within is not None:
            timer = threading.Timer(within, proc.kill)
            timer.start()
        try:
            line = proc.stdout.readline()
        finally:
            if within is not None:
                timer.cancel()
        return line.strip() if line.endswith(b"\n") else None

    def _watch(self) -> None:
        proc = None
        while not self.stopped.is_set():
            proc = self._session()
            if proc is None:
                return
            boot = self._first_line(proc, None)
            if boot:
                break
            self._end(proc)
            if self.stopped.wait(RETRY_EVERY):  # no session yet: the node is not watched
                return
        else:
            return
        self.boot, self.beat = boot, time.monotonic()
        while not self.stopped.is_set():
            line = proc.stdout.readline() if proc.stdout else b""  # a pipe (_session)
            if line.endswith(b"\n"):
                self.beat = time.monotonic()
                if line.startswith(b"P ") and self.progress is not None:
                    self.progress.line(line, self.beat)
                continue
            closed, self.confirming = time.monotonic(), True  # the session closed
            self._end(proc)
            if self.stopped.is_set():
                return
            proc = self._confirm(closed)
            self.confirming = False
            if proc is None:
                return

    def _confirm(self, closed: float) -> subprocess.Popen | None:
        """The session closed at `closed`: the node is dead unless it answers at once and begins a
        new session from the same boot (only the beat's own process died). The new session, or
        None once the node is recorded dead."""
        address = self.node.address
        if not node_answers(address, ssh_port(self.argv[0], address), timeout=CONFIRM_KNOCK):
            self.dead = (closed, "its connection closed, and it no longer answers on the network")
            return None
        proc = self._session()
        if proc is None:
            return None
        boot = self._first_line(proc, REOPEN_WITHIN)
        if boot == self.boot:
            self.beat = time.monotonic()
            return proc
        self._end(proc)
        if not self.stopped.is_set():
            self.dead = (closed, "it restarted: a new boot" if boot else
                         "its connection closed, and it runs no command any more")
        return None

    def close(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass


class Liveness:
    """The beats of an attempt's other nodes, from its start to its end (close)."""

    def __init__(self, nodes, ssh: str | None, python: str, tolerance: int, control_dir: str | None = None,
                 progress=None, globs=None):
        """`progress` (progress.Progress) takes what each node's beat says of its ranks' files,
        `globs` ({name: [pattern]}) names them."""
        self.tolerance = tolerance
        self.looked: float | None = None  # when verdicts() last ran (monotonic)
        self.stopped = threading.Event()
        sharing = ["-o", f"ControlPath={control_dir}/%C"] if control_dir else []
        self.beats = {}
        for node in nodes:
            remote = shlex.join([python, "-S", "-c", BEAT, *(globs or {}).get(node.name, [])])
            self.beats[node.name] = NodeBeat(node, [ssh, "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", *sharing,
                                                    node.address, remote], self.stopped, progress)

    def verdicts(self) -> dict:
        """{name: Verdict} of every watched node, now. A node found lost right after a pause of the
        supervisor itself (the head under memory pressure, a SIGSTOP) is judged again once the
        beats that waited in its pipes are read: never by the supervisor's own silence. Only then
        does it wait; every other look costs nothing more."""
        now = time.monotonic()
        paused = self.looked is not None and now - self.looked > PAUSED_AFTER
        found = self._judged(now)
        if paused and any(verdict.state is NodeState.LOST for verdict in found.values()):
            time.sleep(DRAIN)
            found = self._judged(time.monotonic())
        return found

    def _judged(self, now: float) -> dict:
        self.looked, found = now, {}
        for name, beat in self.beats.items():
            state, since = judge(beat.beat, now, self.tolerance, beat.dead, beat.watched)
            why = beat.dead[1] if beat.dead else ""
            found[name] = Verdict(state, wall_time(since) if since is not None else None, why)
        return found

    def rewatch(self, name: str) -> None:
        """Watch a node proven dead again, from a new session (its replica group started again:
        fault_tolerance torchft)."""
        beat = self.beats.get(name)
        if beat is not None and beat.dead is not None and not self.stopped.is_set():
            self.beats[name] = NodeBeat(beat.node, beat.argv, self.stopped, beat.progress)

    def ending(self) -> dict:
        return ending_of(self.verdicts())

    def not_alive(self) -> dict:
        return not_alive_of(self.verdicts())

    def settle(self, seconds: float) -> None:
        """Wait (at most `seconds`) for the nodes whose session just closed to be judged: the
        launcher often ends a moment after the connection that proves a node dead."""
        deadline = time.monotonic() + seconds
        while any(beat.confirming for beat in self.beats.values()) and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self) -> None:
        self.stopped.set()
        for beat in self.beats.values():
            beat.close()
