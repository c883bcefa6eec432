"""The follower: a run's output as it is written, and its end, printed on the head for the
torchfleet command (`logs -f`, `wait`, an attached launch), which reads it over ssh.

It reads launcher.log and the head's own worker files, and each other node's worker files through
a line server run there (line_server.py) over the cluster's ssh. The controller sends it to the
head as one `python3 -S -c` program made of PROGRAM's files (ssh_to_nodes.program); on the head itself
it also runs as `python3 -S -m _on_node.follower`. Standard library only.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import shlex
import subprocess
import sys
import threading
import time

from .labels import shown_parts
from .line_server import CAUGHT_UP, PROGRAM as LINE_SERVER, SERVE_HELLO
from .loader import program_of
from .privileges import Refused, drop_root
from .record import (ACTIVE, LAUNCHER_LOG, PLAN_FILE, STATE_FILE, newest_run, node_workers, owner_of, read_state,
                     request_value, run_dir_of, runs_index)
from .tail import CUT, POLL, WHOLE, Tail, WorkerFiles

# The files of the follower's program, each before those importing it.
PROGRAM = ("privileges", "record", "labels", "tail", "loader", "line_server", "follower")
# The follower's lines on stdout: "L <output line>" while the run goes on, "KIND KEY <text>" for
# the pieces of a line redrawn or cut (kinds P, R, C, D: see Tail.pieces; KEY names the file, one
# word), "S <status>" when a scheduler's job changes state (pending and why, running), "E <record>"
# once.
LINE, STATUS, END = "L ", "S ", "E "
PIECES = ("P ", "R ", "C ", "D ")
REMOTE_QUIET = 10  # seconds a node's reader may say nothing after the run's end before it is given up
# Bytes of the other nodes' output the follower holds on the head, waiting to be shown: past it, the
# nodes' readers wait (a slow terminal holds the nodes back, never the head's memory). A piece
# bigger than it (a line server sends at most tail.CHUNK) passes alone.
QUEUE_BYTES = 16 << 20


class ByteQueue:
    """The node readers' pieces on their way to the follower, bounded in bytes, not pieces."""

    def __init__(self, limit: int = QUEUE_BYTES):
        self.limit, self.held, self.peak = limit, 0, 0
        self.items: collections.deque = collections.deque()
        self.changed = threading.Condition()

    def put(self, item: tuple, size: int) -> None:
        with self.changed:
            while self.held and self.held + size > self.limit:
                self.changed.wait()
            self.items.append((item, size))
            self.held += size
            self.peak = max(self.peak, self.held)

    def get_nowait(self) -> tuple:
        with self.changed:
            if not self.items:
                raise queue.Empty
            item, size = self.items.popleft()
            self.held -= size
            self.changed.notify_all()
            return item

    def empty(self) -> bool:
        return not self.items


def line_server_program(package: str) -> str:
    """The line server's program, of the head package in `package` (the run's version). A
    package of a version before the line server was a file of its own serves from its record.py,
    a program by itself."""
    def text(name):
        with open(os.path.join(package, name + ".py"), encoding="utf-8") as handle:
            return handle.read()
    if not os.path.exists(os.path.join(package, "line_server.py")):
        return text("record")
    return program_of([(name, text(name)) for name in LINE_SERVER], "line_server")


class NodeReader:
    """The worker files of one other node, read there by its line server over the cluster's
    ssh; a thread puts (this reader, local rank, line) on `lines`, then (this reader, None,
    error or None). `group`: the attempt's nodes, in rank order; `index`: this node's among them."""

    wanted: set[int] | None  # the local ranks shown, None for all (set by RunOutput)

    def __init__(self, index: int, node: dict, plan: dict, program: str, directory: str,
                 from_start: bool, lines, group=None):
        remote = shlex.join([request_value(plan, "python"), "-S", "-c", program, "serve", directory,
                             "start" if from_start else "now"])
        self.index, self.name, self.lines, self.group = index, node["name"], lines, group
        self.heard, self.caught_up = time.monotonic(), False
        # As the training account (main() put root's privileges down), whose key and known_hosts
        # reach the nodes: the ssh that run.json names runs with that account's rights alone.
        self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [plan["ssh"], "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", node["address"], remote],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        """Put each piece the node's line server sends; whatever happens, its end last (the
        follower waits for every reader's end). A line cut by the connection's end, or one that
        is not the server's, is left out and said once."""
        pieces, failed, odd = False, None, 0  # a reader of this version says so first; an older one sends whole lines
        try:
            for raw in self.proc.stdout or ():  # a pipe (__init__)
                self.heard = time.monotonic()
                if raw == CAUGHT_UP:
                    self.caught_up = True
                    continue
                if raw == SERVE_HELLO:
                    pieces = True
                    continue
                try:
                    if not raw.endswith(b"\n"):
                        raise ValueError("cut")
                    if pieces:
                        local, stream, kind, text = raw[:-1].split(b" ", 3)
                    else:
                        (local, text), stream, kind = raw[:-1].split(b" ", 1), b"o", WHOLE
                    self.lines.put((self, int(local), stream, kind, text), len(text))
                except ValueError:
                    odd += 1
                    if odd == 1:
                        self.lines.put((self, -1, None, None, raw[:200]), 0)
        except Exception as error:  # pylint: disable=broad-exception-caught
            # Said, and the follower goes on without this node.
            failed = f"its reader failed: {error!r}"
        finally:
            self.caught_up = True
            try:
                said = (self.proc.stderr.read() if self.proc.stderr else b"").decode("utf-8", "replace").strip().splitlines()
                rc = self.proc.wait()
            except (OSError, ValueError) as error:
                said, rc = [f"its reader failed: {error!r}"], 1
            end = failed or ((said[-1] if said else f"ssh exited {rc}") if rc else None)
            self.lines.put((self, None, None, None, end), 0)

    def finish(self) -> None:
        """The run has ended: the node's reader sends the rest of its files, then exits."""
        try:
            if self.proc.stdin:  # a pipe (__init__)
                self.proc.stdin.close()
        except OSError:
            pass


class RunOutput:
    """A run's output as a follower shows it (see labels.shown): launcher.log on the head, and where
    the ranks' output is not copied there (SupervisorPlan.worker_files), torchrun's worker files:
    the head's read here, the other nodes' through a NodeReader each. A restarted run has a
    directory of worker files per attempt (the record's attempts), each with its own nodes."""

    def __init__(self, run_dir: str, record: dict, ranks: str, from_start: bool):
        self.record, self.ranks, self.run_dir, self.from_start = record, ranks, run_dir, from_start
        self.launcher = Tail(os.path.join(run_dir, LAUNCHER_LOG), redraws=False)
        if not from_start:
            try:
                self.launcher.position = os.path.getsize(self.launcher.path)
            except OSError:
                pass
        self.head_files: list[tuple[list, int, WorkerFiles]] = []
        self.readers: list[NodeReader] = []
        self.followed: set[str] = set()
        self.queue = ByteQueue()  # bounded in bytes: a slow reader holds the nodes back
        try:
            with open(os.path.join(run_dir, PLAN_FILE), encoding="utf-8") as handle:
                self.plan = json.load(handle)
        except (OSError, ValueError):
            self.plan = {}
        if ranks == "none" or not self.plan.get("worker_files"):
            self.plan = {}
        self.server_program: str | None = None
        self.update(record)

    def update(self, record: dict) -> None:
        """Follow the worker files of every attempt the record names that is not followed yet."""
        self.record = record
        if not self.plan:
            return
        # A Slurm job's nodes, in rank order, are known once it runs (or it never ran).
        slurm = request_value(self.plan, "scheduler") == "slurm"
        attempts = record.get("attempts") or [
            {"workers": self.plan["paths"]["workers"], "job_nodes": record.get("job_nodes"),
             "nodes": record.get("nodes") or [node["name"] for node in self.plan["nodes"]]}]
        for attempt in attempts:
            if slurm and not attempt.get("job_nodes"):
                continue
            if attempt.get("workers") and attempt["workers"] not in self.followed:
                # The first look honours from_start; an attempt that begins later is read whole.
                self._follow(attempt["workers"], list(attempt["nodes"]), self.from_start or bool(self.followed))
                self.followed.add(attempt["workers"])

    def _follow(self, directory: str, group: list, from_start: bool) -> None:
        # Every node of the request, not only the first attempt's: a spare or a node taken back
        # serves a later attempt's files.
        nproc = self.plan["nproc"]
        by_name = {node["name"]: node for node in [*(request_value(self.plan, "nodes") or []), *self.plan["nodes"]]}
        # {index in the group: its local ranks to show, None for all}: rank = index * nproc + local.
        if self.ranks == "all":
            wanted = dict.fromkeys(range(len(group)))
        elif self.ranks.startswith("node:"):
            wanted = {group.index(self.ranks[5:]): None} if self.ranks[5:] in group else {}
        else:
            rank = int(self.ranks.partition(":")[2] or self.ranks)
            wanted = {rank // nproc: {rank % nproc}} if rank < nproc * len(group) else {}
        for index, locals_ in wanted.items():
            # Runs of an older torchfleet: every node's files straight under the directory.
            own = node_workers(directory, index) if self.plan.get("node_dirs") else directory
            if group[index] == request_value(self.plan, "head"):
                self.head_files.append((group, index, WorkerFiles(own, locals_, from_start)))
                continue
            if self.server_program is None:  # from the head package the run started from
                # (No package named: a version that installed it in the run's own directory.)
                package = self.plan.get("package") or os.path.join(self.run_dir, "supervisor", "_head")
                self.server_program = line_server_program(package)
            reader = NodeReader(index, by_name[group[index]], self.plan, self.server_program, own, from_start,
                                self.queue, group)
            reader.wanted = locals_
            self.readers.append(reader)

    def _worker_piece(self, group: list, index: int, local: int, stream: bytes, kind: bytes, text: bytes) -> tuple:
        """(kind, key, text) of a piece of a worker's output, as shown: `key` names its file."""
        label = "" if self.ranks == "0" or self.ranks.startswith("rank:") else \
            f"[rank {index * self.plan['nproc'] + local} {group[index]}] "
        return kind.decode(), f"{group[index]}/{local}{stream.decode()}", label + text.decode("utf-8", "replace")

    def _launcher_pieces(self, kind: bytes, raw: bytes) -> list:
        """A launcher.log line as shown: its redraws ("\r") split once its tag is read."""
        parts = shown_parts(raw.decode("utf-8", "replace"), self.record, self.ranks)
        if parts is None:
            return []
        label, text = parts
        if kind == CUT or "\r" not in text:
            return [(kind.decode(), "launcher", label + text)]
        *redraws, last = text.split("\r")
        key = "launcher/" + label.strip().replace(" ", "_")
        return [("P", key, label + redraw) for redraw in redraws if redraw.strip()] + [("D", key, label + last)]

    def caught_up(self) -> bool:
        """Whether every node's reader has sent what its files held when it started."""
        return all(reader.caught_up for reader in self.readers)

    def read(self, final: bool) -> tuple[list, bool]:
        """([(kind, key, text)] to show, whether more is waiting now): the pieces of lines (see
        Tail.pieces; kind as a str), `key` naming the file each comes from."""
        found, more = self.launcher.pieces(final)
        shown_pieces = [piece for kind, raw in found for piece in self._launcher_pieces(kind, raw)]
        for group, index, files in self.head_files:
            pieces, waiting = files.read(final)
            shown_pieces += [self._worker_piece(group, index, *piece) for piece in pieces]
            more = more or waiting
        taken = 0  # bytes of the nodes' pieces in this batch: at most QUEUE_BYTES (and one piece)
        while len(shown_pieces) < 4096 and taken < QUEUE_BYTES:
            try:
                reader, local, stream, kind, text = self.queue.get_nowait()
            except queue.Empty:
                break
            if local is None:
                self.readers = [other for other in self.readers if other is not reader]
                if text:
                    shown_pieces.append(("L", "", f"[{reader.name}] torchfleet: its worker logs could not "
                                                  f"be read from the head: {text}"))
            elif local < 0:
                shown_pieces.append(("L", "", f"[{reader.name}] torchfleet: a line cut short or not of its line "
                                              f"server was left out (and any like it): {text.decode('utf-8', 'replace')!r}"))
            elif reader.wanted is None or local in reader.wanted:
                taken += len(text)
                shown_pieces.append(self._worker_piece(reader.group, reader.index, local, stream, kind, text))
        return shown_pieces, more or not self.queue.empty()

    def finish(self):
        """The run has ended: every node's rest, in batches of lines; a node's reader is given
        up after REMOTE_QUIET seconds of silence since the end began, or since it last spoke (a
        node lost with the run): a node quiet before the end still sends its last line."""
        began = time.monotonic()
        for reader in self.readers:
            reader.finish()
        while True:
            lines, more = self.read(final=True)
            if lines or more:
                yield lines
                continue
            quiet = [r for r in self.readers if time.monotonic() - max(r.heard, began) > REMOTE_QUIET]
            for reader in quiet:
                reader.proc.kill()
            if not self.readers:
                return
            time.sleep(POLL)


def follow(run_dir: str, ranks: str = "0", from_start: bool = True, wait_start: float = 30,
           out=None, until_end: bool = True, tail: int | None = None) -> dict:
    """Print the run's output as it is written (LINE-prefixed and PIECES, see `RunOutput`) until the run has
    ended (or, not `until_end`, what there is now), then its record (END-prefixed, JSON);
    returns the record. `tail`: of what was written before, only the last `tail` lines."""
    out = out or sys.stdout
    deadline = time.monotonic() + wait_start
    record = read_state(run_dir)
    while record is None:  # the supervisor writes the record as it starts
        if time.monotonic() >= deadline:
            record = {"state": "unknown", "msg": f"no run record in {run_dir}"}
            out.write(END + json.dumps(record) + "\n")
            out.flush()
            return record
        time.sleep(POLL)
        record = read_state(run_dir)
    output, said = RunOutput(run_dir, record, ranks, from_start), None
    held: list[collections.deque | None] = [collections.deque(maxlen=tail)] if tail else [None]  # until caught up: the last lines

    def write(pieces):
        if held[0] is not None:  # a drawing is not a line: none is held
            held[0].extend(piece for piece in pieces if piece[0] != "R")
            return
        for kind, key, text in pieces:
            out.write(LINE + text + "\n" if kind == "L" else f"{kind} {key} {text}\n")
        if pieces:
            out.flush()

    def release():
        if held[0] is not None:
            lines, held[0] = list(held[0]), None
            write(lines)
    while True:
        # A scheduler's job: its state and Slurm's reason, each time they change (pending, running).
        if record.get("state") in ACTIVE and record.get("job_state") and record.get("msg") != said:
            said = record.get("msg")
            out.write(STATUS + str(said) + "\n")
            out.flush()
        if record.get("state") not in ACTIVE or not until_end:
            # The launcher's last words and the ranks' were written before the record.
            for lines in output.finish():
                write(lines)
            release()
            out.write(END + json.dumps(record) + "\n")
            out.flush()
            return record
        lines, more = output.read(final=False)
        write(lines)
        if not more and output.caught_up():
            release()
        if not more:
            time.sleep(POLL)
            record = read_state(run_dir) or record
            output.update(record)


def main(argv: list[str] | None = None) -> int:
    """follow|print RUN_DIR_OR_LOG_DIR [RANKS [FROM_START [TAIL]]]: the newest run when given the log
    dir; print: what the log holds now, and the record."""
    argv = sys.argv[1:] if argv is None else argv  # a `-c` program's main() is given none
    if len(argv) < 2 or argv[0] not in ("follow", "print"):
        sys.stderr.write("usage: follow|print RUN_DIR|LOG_DIR [0|all|none|rank:N|node:HOST] [start|now] [TAIL]\n")
        return 2
    # Root reads nothing of a run's: the files are its account's and its ranks' (docs/security.md).
    try:
        drop_root(argv[1])
    except (Refused, KeyError, OSError) as error:
        sys.stdout.write(END + json.dumps({"state": "unknown", "msg": f"not followed as root: {error}"}) + "\n")
        return 0
    where = os.path.expanduser(argv[1])
    if not os.path.exists(os.path.join(where, STATE_FILE)):
        # LOG_DIR/RUN_ID of a run with a log_dir of its own: its account's index knows where it is.
        index = runs_index(owner_of(argv[1]))
        indexed = run_dir_of(os.path.dirname(where), os.path.basename(where), index)
        run_id = None if indexed != where else newest_run(where, index)
        if indexed != where:
            where = indexed
        elif run_id is None:
            sys.stdout.write(END + json.dumps({"state": "unknown", "msg": f"no run under {where}"}) + "\n")
            return 0
        else:
            where = run_dir_of(where, run_id, index)
    ranks = argv[2] if len(argv) > 2 else "0"
    from_start = (argv[3] if len(argv) > 3 else "start") == "start"
    tail = int(argv[4]) if len(argv) > 4 else None
    try:
        follow(where, ranks, from_start, until_end=argv[0] == "follow", tail=tail)
    except BrokenPipeError:  # the reader went (the torchfleet command ended); the run goes on
        return 0
    return 0


if __name__ == "__main__":
    # Run as its own program on the head, not inside a module: an exit status, not exit_json.
    raise SystemExit(main())
