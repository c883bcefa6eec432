"""The line server: on each node but the head, its worker files sent to the head's follower
as they grow (`serve WORKERS_DIR start|now`), until the follower closes its stdin at the run's end.

The follower runs it over the cluster's ssh as one `python3 -S -c` program made of PROGRAM's
files, from the head package the run started from (follower.line_server_program). Standard
library only.
"""

from __future__ import annotations

import os
import select
import sys

from .tail import POLL, WorkerFiles

# The files of the line server's program, each before those importing it.
PROGRAM = ("tail", "line_server")
CAUGHT_UP = b"-\n"  # a node's reader has sent what its files held when it started
SERVE_HELLO = b"=2\n"  # what a node's reader says first: its lines are "LOCAL STREAM KIND TEXT"


def serve_worker_lines(directory: str, from_start: bool) -> int:
    """On a node, for the head's follower: SERVE_HELLO, then "LOCAL_RANK STREAM KIND TEXT" for
    every piece of this node's worker files (see Tail.pieces), as they grow, until stdin closes
    (the run has ended); then the rest, and exit."""
    files, final = WorkerFiles(directory, None, from_start), False
    caught_up: bool | None = False
    out = sys.stdout.buffer
    out.write(SERVE_HELLO)
    while True:
        found, more = files.read(final)
        for local, stream, kind, text in found:
            out.write(b"%d %s %s %s\n" % (local, stream, kind, text))
        if not more and not caught_up:  # what the files held at the start has been sent
            out.write(CAUGHT_UP)
            caught_up = True
        if found or caught_up is True:
            out.flush()
            caught_up = caught_up or None
        if final and not more:
            return 0
        if not more and not final and select.select([sys.stdin], [], [], POLL)[0]:
            final = not os.read(sys.stdin.fileno(), 4096)


def main(argv: list[str] | None = None) -> int:
    """serve WORKERS_DIR [start|now]: the words a run's record.py took before the line server was
    a file of its own, so that the follower asks either the same."""
    argv = sys.argv[1:] if argv is None else argv  # a `-c` program's main() is given none
    if len(argv) < 2 or argv[0] != "serve":
        sys.stderr.write("usage: serve WORKERS_DIR [start|now]\n")
        return 2
    try:
        return serve_worker_lines(argv[1], (argv[2] if len(argv) > 2 else "start") == "start")
    except BrokenPipeError:  # the head's follower went
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
