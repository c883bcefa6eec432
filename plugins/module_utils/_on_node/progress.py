"""A run's progress, rank by rank, and what makes an attempt hung.

A rank makes progress when it writes to its output files on its node: any line, or a `\\r`
redraw of a progress bar, or the optional mark `TORCHFLEET_STEP N` (a line of its own) that also
says which step it reached. Each node's beat (liveness.BEAT) looks at its ranks' files every
second and says which grew (SCAN); the head looks at its own the same way (LocalScan). An attempt
is hung when no rank has made progress for hang_timeout while every node is alive: a silent or
paused node stops the clock, since its ranks could not have written (liveness says when that
node is lost). The default timeout is learned from the run (learned_timeout).

A straggler is a rank whose marks show it stepping clearly slower than the others: over its last
STRAGGLER_WINDOW s of marks, under STRAGGLER_RATIO of the median rate of the other ranks. Ranks in
lockstep (a collective each step) all step at the slowest one's rate, so none is named there: the
rule names the slow rank of a run whose ranks step apart (asynchronous work, collectives every
many steps, independent workers).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import deque

from .labels import slot_owner

# Run on each node by the beat (python -S: the standard library alone) and by the head for its
# own files: each look writes "P SIZE STEP PATH" for every file that grew (STEP: the last mark
# in what it wrote since, or -). A file not grown is not read.
SCAN = r'''
import glob, os, re
_MARK = re.compile(rb"(?:^|[\r\n])TORCHFLEET_STEP[ =](\d+)")
def scan(patterns, sizes, write):
    for pattern in patterns:
        for path in glob.glob(pattern):
            try:
                size = os.stat(path).st_size
            except OSError:
                continue
            before = sizes.get(path, 0)
            if size == before:
                continue
            sizes[path] = size
            step = b"-"
            if size > before:
                start = max(before, size - 65536)
                try:
                    with open(path, "rb") as handle:
                        handle.seek(start)
                        found = _MARK.findall(handle.read(size - start))
                except OSError:
                    found = []
                step = found[-1] if found else step
            write(b"P %d %s %s\n" % (size, step, os.fsencode(path)))
'''
_SCAN: dict = {}
exec(SCAN, _SCAN)  # pylint: disable=exec-used  # the same code the nodes run, here for the head
scan = _SCAN["scan"]

# The default timeout, learned from the run: HANG_FACTOR times the longest gap seen between two
# progress of the run, and never under HANG_FLOOR (NCCL's own watchdog default, 10 minutes: a
# first epoch that prints nothing for minutes is not a hang). 0 (the option) never judges.
HANG_FLOOR = 600
HANG_FACTOR = 3
STOPPED_FIRST_WITHIN = 1.0  # seconds: the ranks whose last progress is this close to the oldest
NAMED = 4  # ranks named in a sentence, at most
STRAGGLER_WINDOW = 30.0  # seconds of a rank's marks its step rate is judged over
STRAGGLER_RATIO = 0.5  # a rank under this fraction of the others' median rate is a straggler
STRAGGLER_MIN_STEPS = 10  # the others' median must make this many steps in a window to judge

_TORCHRUN_FILE = re.compile(r"/node(\d+)/[^/]+/attempt_\d+/(\d+)/std(?:out|err)\.log$")
_RANK_FILE = re.compile(r"/rank\.(\d+)/std(?:out|err)$")


def patterns(mode: str, workers: str | None, ranks: str | None, index: int) -> list[str]:
    """The files of the attempt's ranks on its node `index`: torchrun's files of that node's
    workers (of this attempt's log directory: an earlier attempt's ranks write elsewhere), or Open
    MPI's per-rank files in rank mode."""
    if mode != "rank" and workers:
        return [f"{glob_escape(workers)}/node{index}/*/attempt_*/*/std*.log"]
    if mode == "rank" and ranks:
        return [f"{glob_escape(ranks)}/*/rank.*/std*"]
    return []


def glob_escape(path: str) -> str:
    return re.sub(r"([*?[])", r"[\1]", path)


def learned_timeout(longest_gap: float) -> float:
    return max(HANG_FLOOR, HANG_FACTOR * longest_gap)


class RankProgress:
    """One rank's last progress: when (monotonic), its node, the last step it marked, and its
    marks of the last window (the first one at or before the window's start)."""

    def __init__(self, node: str | None, last: float):
        self.node, self.last = node, last
        self.step: int | None = None
        self.marks: deque = deque()  # (monotonic, step)

    def marked(self, step: int, now: float) -> None:
        self.marks.append((now, step))
        while len(self.marks) > 1 and self.marks[1][0] <= now - STRAGGLER_WINDOW:
            self.marks.popleft()

    def rate(self) -> float | None:
        """Steps a second over the rank's last STRAGGLER_WINDOW s of marks (up to its newest, so a
        rank that ended keeps the rate it had); None before it has marked for a window, or where
        its count went back (a new epoch counting from 0)."""
        if len(self.marks) < 2 or self.marks[0][0] > self.marks[-1][0] - STRAGGLER_WINDOW:
            return None
        steps = self.marks[-1][1] - self.marks[0][1]
        return steps / STRAGGLER_WINDOW if steps >= 0 else None


class Progress:
    """Every rank's progress in one attempt, and the hang judged from it. Fed by the beats'
    readers and the head's LocalScan (threads); judged by the supervisor."""

    def __init__(self, nodes: list[str], nproc: int, slots: list[int], timeout: int | None):
        self.nodes, self.nproc, self.slots, self.timeout = nodes, nproc, slots, timeout
        self.ranks: dict[int, RankProgress] = {}
        self.latest: float | None = None  # the newest progress of any rank
        self.rank_files = False  # whether the ranks' files are Open MPI's per rank (rank mode)
        self.longest_gap = 0.0
        self.paused_until: float | None = None  # the last moment a node was not alive
        self.stragglers: dict[int, tuple[float, float]] = {}  # rank: (its rate, the others'), once judged
        self.lock = threading.Lock()

    def rank_of(self, path: str) -> tuple[int, str | None] | None:
        found = _TORCHRUN_FILE.search(path)
        if found:
            index = int(found.group(1))
            node = self.nodes[index] if index < len(self.nodes) else None
            return index * self.nproc + int(found.group(2)), node
        found = _RANK_FILE.search(path)
        if found:
            self.rank_files = True  # rank mode: a rank's node is the one holding its slot
            rank = int(found.group(1))
            owner = slot_owner(rank, self.slots)
            return rank, self.nodes[owner] if owner is not None else None
        return None

    def node_of(self, rank: int) -> str | None:
        """The node a rank runs on, by the attempt's layout (torchrun: nproc a node; rank mode: slots)."""
        index = slot_owner(rank, self.slots) if self.rank_files else rank // self.nproc
        return self.nodes[index] if index is not None and index < len(self.nodes) else None

    def line(self, line: bytes, now: float | None = None) -> None:
        """A scan's line ("P SIZE STEP PATH"), as a node's beat or the head's scan said it."""
        try:
            _tag, _size, step, path = line.rstrip(b"\n").split(b" ", 3)
        except ValueError:
            return
        self.saw(os.fsdecode(path), None if step == b"-" else int(step), time.monotonic() if now is None else now)

    def saw(self, path: str, step: int | None, now: float) -> None:
        owner = self.rank_of(path)
        if owner is None:
            return
        rank, node = owner
        with self.lock:
            entry = self.ranks.setdefault(rank, RankProgress(node, now))
            marks = entry.step is not None or step is not None
            stepped = step is not None and step != entry.step
            if step is not None:
                entry.step = step
                entry.marked(step, now)
            # A rank that marks its steps makes progress by a step, not by output: its logging
            # thread or DataLoader worker printing on while it is stuck at one step is no progress.
            # A rank that never marks (a progress bar, a quiet worker) is judged by its output.
            if marks and not stepped:
                return
            entry.last = now
            if self.latest is not None:
                self.longest_gap = max(self.longest_gap, now - self.latest)
            self.latest = now if self.latest is None else max(self.latest, now)

    def not_alive(self, now: float) -> None:
        """A node silent or paused now: its ranks cannot write, so the clock waits."""
        self.paused_until = now

    def allowed(self) -> float | None:
        """Seconds without progress that make the attempt hung; None: never."""
        if self.timeout == 0:
            return None
        return float(self.timeout) if self.timeout and self.timeout > 0 else learned_timeout(self.longest_gap)

    def hung(self, now: float) -> dict | None:
        """{since (monotonic), allowed, stopped_first: [rank, ...]} once no rank has made progress
        for the allowed time; None while progress goes on, before the first progress (the start is
        start_timeout's), or with hang_timeout 0."""
        allowed = self.allowed()
        with self.lock:
            if allowed is None or self.latest is None:
                return None
            quiet_from = max(self.latest, self.paused_until or 0.0)
            if now - quiet_from < allowed:
                return None
            return {"since": self.latest, "allowed": allowed, "stopped_first": self.stopped_first()}

    def stopped_first(self) -> list[int]:
        """The ranks that stopped first: those at the lowest step where ranks mark their steps,
        else those whose last progress is the oldest."""
        marked = {rank: entry.step for rank, entry in self.ranks.items() if entry.step is not None}
        if marked and len(marked) == len(self.ranks):
            lowest = min(marked.values())
            if lowest < max(marked.values()):
                return sorted(rank for rank, step in marked.items() if step == lowest)
        oldest = min(entry.last for entry in self.ranks.values())
        return sorted(rank for rank, entry in self.ranks.items() if entry.last - oldest <= STOPPED_FIRST_WITHIN)

    def judge_stragglers(self) -> dict[int, float]:
        """Name (and keep named, with its latest figures) each rank stepping under STRAGGLER_RATIO
        of the median rate of the others, where that median makes STRAGGLER_MIN_STEPS a window.
        Returns every rank's rate where it has one."""
        rates = {rank: rate for rank, entry in self.ranks.items() if (rate := entry.rate()) is not None}
        newest = {rank: self.ranks[rank].marks[-1][0] for rank in rates}
        for rank, rate in rates.items():
            # Against the ranks that marked during its window only: a rank's window past a quiet
            # spell (an evaluation, then the last step) is another time than the others' before it.
            others = sorted(value for other, value in rates.items()
                            if other != rank and newest[other] >= newest[rank] - STRAGGLER_WINDOW)
            if not others:
                continue
            middle = len(others) // 2
            median = others[middle] if len(others) % 2 else (others[middle - 1] + others[middle]) / 2
            if median * STRAGGLER_WINDOW >= STRAGGLER_MIN_STEPS and rate < STRAGGLER_RATIO * median:
                self.stragglers[rank] = (rate, median)
        return rates

    def shown(self, wall) -> dict:
        """{hang_after: the seconds allowed now (None: never), ranks: {rank: {node, last (the
        head's clock), step, rate (steps/s)}}, stragglers: {rank: sentence}} for the record: `wall`
        turns a monotonic time into the head's clock. {} before the first progress."""
        allowed = self.allowed()
        with self.lock:
            if not self.ranks:
                return {}
            rates = self.judge_stragglers()
            shown: dict = {"hang_after": None if allowed is None else round(allowed),
                           "ranks": {str(rank): {"node": entry.node, "last": wall(entry.last),
                                                 **({"step": entry.step} if entry.step is not None else {}),
                                                 **({"rate": round(rates[rank], 2)} if rank in rates else {})}
                                     for rank, entry in sorted(self.ranks.items())}}
            if self.stragglers:
                shown["stragglers"] = {
                    str(rank): f"rank {rank} on {self.ranks[rank].node or '?'}: {rate:.2f} steps/s over its "
                               f"last {STRAGGLER_WINDOW:.0f} s, the others {median:.2f} (their median)"
                    for rank, (rate, median) in sorted(self.stragglers.items())}
            return shown

    def named(self, ranks: list[int], wall) -> str:
        """The ranks as a sentence names them: rank 2 on node2 (step 19, last progress at T)."""
        parts = []
        for rank in ranks[:NAMED]:
            entry = self.ranks.get(rank)
            if entry is None:  # it never wrote (only rank 0 prints, say): named by its place
                parts.append(f"rank {rank} on {self.node_of(rank) or '?'} (no output)")
                continue
            step = f"step {entry.step}, " if entry.step is not None else ""
            parts.append(f"rank {rank} on {entry.node or '?'} ({step}last progress at {wall(entry.last)})")
        more = f" and {len(ranks) - NAMED} more" if len(ranks) > NAMED else ""
        return ", ".join(parts) + more


class LocalScan:
    """The head's own ranks' files, looked at every `every` s in a thread, into `progress`."""

    def __init__(self, progress: Progress, globs: list[str], every: float = 1.0):
        self.progress, self.globs, self.every = progress, globs, every
        self.stopped = threading.Event()
        self.sizes: dict = {}
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(self.every):
            scan(self.globs, self.sizes, self.progress.line)

    def close(self) -> None:
        self.stopped.set()
