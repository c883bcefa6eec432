"""The end of a log that may be many gigabytes, as a record or a report quotes it: its last lines,
each as it was left, each clipped."""

from __future__ import annotations

import glob
import os


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
