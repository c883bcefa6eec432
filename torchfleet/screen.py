"""A run's output on the user's terminal: lines redrawn in place (progress bars) as they are redrawn.

The follower passes on the pieces of a line a script redraws with "\r" (tqdm, rich, Lightning's
bars): each redraw while the line is open, what it reads between two redraws, and its end (see
the head package's tail.Tail.pieces). On a terminal every open line is drawn in place at the
bottom, one row per file still drawing (rank 0's stderr; with --all-ranks each rank's own), and
lines that end are printed above them; anywhere else each redraw is a line of its own.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import typing

UP_AND_CLEAR = "\x1b[{}A\r\x1b[J"  # ANSI: the cursor up N rows, then clear to the screen's end

# What a terminal takes as a command, not text: every C0 control but tab, newline and carriage
# return (a "\r" only redraws the row), DEL and the C1 controls (U+009B is a CSI of its own). ESC
# starts every escape sequence (OSC 52 writes the clipboard, OSC 0 the title, CSI moves the cursor
# and clears the screen): shown as text, the rest of a sequence is text too.
CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# Colours and text styles (SGR, CSI ... m) alone pass as they are, as `less -R` passes them: a log
# coloured by its logger stays readable, and SGR neither moves the cursor nor talks to the host.
_COLOUR_OR_CONTROL = re.compile("(\x1b\\[[0-9;:]{0,32}m)|" + CONTROLS.pattern)


def inert(text: str) -> str:
    """`text` with each control character a terminal would act on shown as its escape (\\x1b);
    colours kept."""
    return _COLOUR_OR_CONTROL.sub(lambda found: found.group(1) or f"\\x{ord(found.group()):02x}", text)


class Inert:
    """A terminal's stream that shows what it is given as text: the run's output, a node's word
    (run records, module results) and Ansible's are the training account's to write, and a
    terminal would run their escapes. torchfleet's own drawing (Live, the playbook's progress)
    writes its escapes to `terminal` itself."""

    def __init__(self, terminal: typing.TextIO):
        self.terminal = terminal

    def write(self, text: str) -> int:
        self.terminal.write(inert(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name):  # flush, isatty, fileno, encoding: the terminal's own
        return getattr(self.terminal, name)


def guard_terminals() -> tuple[typing.TextIO, typing.TextIO]:
    """sys.stdout and sys.stderr made Inert where each is a terminal; (the two before). A file or a
    pipe gets the bytes as written: they are the user's to read (less -R, grep, a log kept), and
    only a terminal acts on them as they are written."""
    before = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (typing.cast(typing.TextIO, Inert(stream))
                              if stream is not None and stream.isatty() and not isinstance(stream, Inert)
                              else stream for stream in before)  # None: closed when the command started
    return before


def drawing(stream):
    """Where torchfleet's own escapes go: the terminal behind an Inert stream, else the stream."""
    return stream.terminal if isinstance(stream, Inert) else stream


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
            drawing(self.stream).write(UP_AND_CLEAR.format(self.rows))
            self.rows = 0

    def _draw(self) -> None:
        # One row each, cut to the terminal's width: a wrapped row would break the count of rows
        # (cut as shown: a control's escape is four characters wide).
        width = max(10, shutil.get_terminal_size().columns - 1)
        for text in self.open.values():
            self.stream.write(inert(text).expandtabs()[:width] + "\n")
        self.rows = len(self.open)
        self.stream.flush()

    def line(self, text: str) -> None:
        self._clear()
        self.stream.write(inert(text) + "\n")
        self._draw()

    def piece(self, kind: str, key: str, text: str) -> None:
        if kind == "S":  # torchfleet's own word (a Slurm job's state), on stderr, above the bars
            self._clear()
            self.stream.flush()
            print(inert(text), file=self.errors, flush=True)
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
            self.stream.write(inert(text) + "\n")
        self.open.clear()
        self.stream.flush()
