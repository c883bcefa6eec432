"""A run's output on the user's terminal: lines redrawn in place (progress bars) as they are redrawn.

The follower passes on the pieces of a line a script redraws with "\r" (tqdm, rich, Lightning's
bars): each redraw while the line is open, what it reads between two redraws, and its end (see
the head package's tail.Tail.pieces). On a terminal every open line is drawn in place at the
bottom, one row per file still drawing (rank 0's stderr; with --all-ranks each rank's own), and
lines that end are printed above them; anywhere else each redraw is a line of its own.
"""

from __future__ import annotations

import os
import shutil
import sys

UP_AND_CLEAR = "\x1b[{}A\r\x1b[J"  # ANSI: the cursor up N rows, then clear to the screen's end


def is_terminal(stream) -> bool:
    return stream.isatty() and os.environ.get("TERM") != "dumb"


class Live:
    """Draws on a terminal: `line(text)` for a line, `piece(kind, key, text)` for the follower's
    pieces (torchfleet.run_stream.follow's on_line and on_piece), `close()` at the end."""

    def __init__(self, stream=None, errors=None):
        self.stream, self.errors = stream or sys.stdout, errors or sys.stderr
        self.open: dict[str, str] = {}  # key: what its line reads now, in the order they opened
        self.rows = 0  # rows of open lines on the screen, below the cursor's line

    def _clear(self) -> None:
        if self.rows:
            self.stream.write(UP_AND_CLEAR.format(self.rows))
            self.rows = 0

    def _draw(self) -> None:
        # One row each, cut to the terminal's width: a wrapped row would break the count of rows.
        width = max(10, shutil.get_terminal_size().columns - 1)
        for text in self.open.values():
            self.stream.write(text.expandtabs()[:width] + "\n")
        self.rows = len(self.open)
        self.stream.flush()

    def line(self, text: str) -> None:
        self._clear()
        self.stream.write(text + "\n")
        self._draw()

    def piece(self, kind: str, key: str, text: str) -> None:
        if kind == "S":  # torchfleet's own word (a Slurm job's state), on stderr, above the bars
            self._clear()
            self.stream.flush()
            print(text, file=self.errors, flush=True)
            self._draw()
        elif kind == "C":  # a piece of a very long line
            self.line(text)
        elif kind == "D":  # the line ended: its final state stays above the bars still open
            self.open.pop(key, None)
            self.line(text)
        else:  # "P", "R": the line as it reads now
            self._clear()
            self.open[key] = text
            self._draw()

    def close(self) -> None:
        """Leave each line still open as its last state, as a line (a run that ended mid-bar)."""
        self._clear()
        for text in self.open.values():
            self.stream.write(text + "\n")
        self.open.clear()
        self.stream.flush()
