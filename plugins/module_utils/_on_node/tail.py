"""A growing file read on from where the last look left it, in pieces of lines (Tail), and the
worker files torchrun writes on a node, each so read (WorkerFiles).

A line a script redraws with "\\r" (a progress bar) comes as each redraw, and a line of any
length in pieces, so that a reader holds a bounded memory and shows a line while it is drawn.
The follower reads launcher.log and the head's worker files with them, the line server the
other nodes' files, and the supervisor a rank's log for its checkpoints. Standard library only,
and nothing of its package (the follower and the line server ship it).
"""

from __future__ import annotations

import glob
import os
import re

POLL = 0.05  # seconds between looks at a quiet file: a written line is passed on within about this
CHUNK = 1 << 20  # bytes of a file read at a time

# torchrun's --log-dir on each node: DIR/<rdzv id>_<random>/attempt_<n>/<local rank>/std*.log.
_WORKER_FILE = re.compile(r"attempt_(\d+)[/\\](\d+)[/\\](stdout|stderr)\.log$")


# A line's pieces, as a follower passes them on (see Tail.pieces). Scripts redraw a line with
# "\r" (tqdm, rich): each redraw a line of its own where the output is a file or a pipe, drawn in
# place on a terminal.
WHOLE = b"L"  # a line that ended, never redrawn: as it was written
REDRAWN = b"P"  # a redraw of a line still open ("\r" ended it): shown as a line, or drawn in place
DRAWING = b"R"  # what a line still open reads now, unended: drawn in place on a terminal, else left
CUT = b"C"  # a piece of a line longer than LINE_CAP: a line of its own everywhere
DONE = b"D"  # the end of a line that was redrawn, drawn or cut: its final state
LINE_CAP = 4 << 20  # bytes of an unended line a reader holds; beyond, it is passed on in pieces
DRAWING_CAP = 1000  # bytes of a drawing passed on: a terminal shows one row of it


def _cut_at(data: bytes, limit: int) -> int:
    """Where to cut `data` at most `limit` bytes in, not inside a UTF-8 character."""
    cut = limit
    while cut > limit - 4 and cut > 0 and data[cut] & 0xC0 == 0x80:
        cut -= 1
    return cut if cut > 0 else limit


class Tail:
    """A growing file, read on from where the last look left it, in pieces of lines: memory is
    bounded by CHUNK and LINE_CAP, whatever the length of a line."""

    def __init__(self, path: str, position: int = 0, redraws: bool = True):
        # Not `redraws`: "\r" is a byte like any other (a launcher's tagged lines, split later).
        self.path, self.position, self.redraws = path, position, redraws
        self.partial = b""  # the open line since its last redraw
        self.drawn = False  # whether a piece of the open line was passed on (it ends with DONE)
        self.said = b""  # the last DRAWING passed on

    def _redraws(self, line: bytes) -> list:
        return line.split(b"\r") if self.redraws else [line]

    def _ended(self, line: bytes) -> tuple:
        self.partial, drawn, self.drawn, self.said = b"", self.drawn, False, b""
        return (DONE if drawn else WHOLE, line)

    def pieces(self, final: bool = False) -> tuple[list, bool]:
        """([(kind, bytes)] since the last look, whether more is waiting). `final`: the writer is
        gone, so an open line is ended too."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.position)
                data = handle.read(CHUNK)
        except FileNotFoundError:
            data = b""
        self.position += len(data)
        more = len(data) == CHUNK
        if not data and not (final and (self.partial or self.drawn)):
            return [], more
        found, lines = [], (self.partial + data).split(b"\n")
        rest = lines.pop()
        for line in lines:
            *redraws, last = self._redraws(line[:-1] if line.endswith(b"\r") else line)
            found += [(REDRAWN, redraw) for redraw in redraws if redraw.strip()]
            self.drawn = self.drawn or bool(redraws)
            found.append(self._ended(last))
        # An "\r" at the very end may be the first half of "\r\n": it waits for the next byte.
        held = rest.endswith(b"\r") and self.redraws
        *redraws, self.partial = self._redraws(rest[:-1] if held else rest)
        found += [(REDRAWN, redraw) for redraw in redraws if redraw.strip()]
        self.drawn = self.drawn or bool(redraws)
        if held:
            self.partial += b"\r"
        if final and not more:
            if self.partial or self.drawn:
                found.append(self._ended(self.partial.rstrip(b"\r")))
            return found, more
        while len(self.partial) > LINE_CAP:
            cut = _cut_at(self.partial, LINE_CAP)
            found.append((CUT, self.partial[:cut]))
            self.partial, self.drawn = self.partial[cut:], True
        drawing = self.partial.rstrip(b"\r")[:DRAWING_CAP] if self.redraws else b""
        if drawing and drawing != self.said and not more:  # with more waiting, it is gone already
            found.append((DRAWING, drawing))
            self.said, self.drawn = drawing, True
        return found, more

    def lines(self, final: bool = False) -> tuple[list, bool]:
        """(the lines ended since the last look, each redraw and piece a line of its own, whether
        more is waiting): the pieces as a file or a pipe shows them."""
        found, more = self.pieces(final)
        return [text for kind, text in found if kind != DRAWING], more


class WorkerFiles:
    """The files torchrun writes for its workers on this node (under `directory`), each read on
    as it grows; only `local_ranks`' if given. Not `from_start`: the files there at the first look
    are read from their end."""

    def __init__(self, directory: str, local_ranks=None, from_start: bool = True):
        self.directory, self.local_ranks, self.from_start = directory, local_ranks, from_start
        self.tails: dict = {}  # path: (local rank, stream: b"o" or b"e", Tail)
        self.looked = False

    def _find(self) -> None:
        pattern = os.path.join(glob.escape(self.directory), "*", "attempt_*", "*", "std*.log")
        for path in sorted(glob.glob(pattern)):
            found = _WORKER_FILE.search(path)
            if path in self.tails or not found:
                continue
            local = int(found.group(2))
            if self.local_ranks is None or local in self.local_ranks:
                start = 0 if self.from_start or self.looked else os.path.getsize(path)
                self.tails[path] = (local, b"o" if found.group(3) == "stdout" else b"e", Tail(path, start))
        self.looked = True

    def read(self, final: bool = False) -> tuple[list, bool]:
        """([(local rank, stream, kind, bytes)], whether more is waiting): what every file holds
        since the last read, each file's pieces in order."""
        self._find()
        found, more = [], False
        for local, stream, tail in self.tails.values():
            pieces, waiting = tail.pieces(final)
            found += [(local, stream, kind, text) for kind, text in pieces]
            more = more or waiting
        return found, more
