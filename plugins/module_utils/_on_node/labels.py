"""Which rank and node wrote each line of a run's launcher.log, and which lines a follower shows.

Open MPI and MPICH's Hydra tag each line with the process that wrote it, torchrun with its worker;
`labelled` reads the tags as a global rank and a node, `shown_parts` chooses and labels the lines
of the ranks asked for, and `untagged` gives the lines back as the ranks wrote them (the record's
quotes of its logs). The launcher's noise is never shown. Used by the follower on the head and by
report.py; standard library only, and nothing of its package (the follower ships it).
"""

from __future__ import annotations

import re

# Open MPI's --tag-output: "[JOB,RANK]<stdout>:" before each line of a process (the node's torchrun
# in torchrun mode, the rank itself in rank mode), in launcher.log and in its per-rank files;
# torchrun's --tee: "[defaultLOCAL_RANK]:".
_MPI_TAG = re.compile(r"^\[\d+,(\d+)\]<(?:stdout|stderr|stddiag)>: ?")
# MPICH Hydra's -prepend-rank: "[RANK] " (the node's torchrun in mpich mode).
_HYDRA_TAG = re.compile(r"^\[(\d+)\] ")
_WORKER_TAG = re.compile(r"^\[[A-Za-z_]\w*?(\d+)\]:")
# The launcher's own words that say nothing to the user, kept in launcher.log, never streamed:
# Open MPI 4.1's rsh launcher races its child's exec to set the ssh's process group (the child
# sets it itself, so nothing is wrong) and warns when it loses, in the middle of a healthy run.
LAUNCHER_NOISE = re.compile(r"^\[[^\]\s]+:\d+\] plm:(?:rsh|ssh): Warning: setpgid\(\d+,\d+\) failed in parent "
                            r"with errno=Permission denied\(13\)\s*$")


def untagged(lines: list[str]) -> list[str]:
    """The lines without Open MPI's tag, or else Hydra's; the launcher's noise left out."""
    return [_MPI_TAG.sub("", line) if _MPI_TAG.match(line) else _HYDRA_TAG.sub("", line)
            for line in lines if not LAUNCHER_NOISE.match(line)]


def slot_owner(rank: int, slots) -> int | None:
    """The index of the node an MPI rank runs on when ranks fill each node's slots in order
    (--map-by slot); None beyond the last slot."""
    filled = 0
    for index, count in enumerate(slots):
        filled += count
        if rank < filled:
            return index
    return None


def labelled(line: str, record: dict) -> tuple[int | None, str | None, str]:
    """(global rank or None, node name or None, the line without launcher tags) for a line of
    launcher.log. A line with no rank is the launcher's own (torchrun, mpirun)."""
    nodes, mode = record.get("nodes") or [], record.get("mode")
    # Each launcher's tag, whichever ran: Hydra's never starts as Open MPI's, nor Open MPI's own
    # untagged words as Hydra's.
    tag = _MPI_TAG.match(line) or _HYDRA_TAG.match(line)
    if not tag:
        return None, None, line
    process, text = int(tag.group(1)), line[tag.end():]
    if mode == "rank":
        index = slot_owner(process, record.get("slots") or [])
        return process, nodes[index] if index is not None else None, text
    host = nodes[process] if 0 <= process < len(nodes) else None
    worker = _WORKER_TAG.match(text)
    if not worker:
        return None, host, text
    return process * (record.get("nproc") or 1) + int(worker.group(1)), host, text[worker.end():]


def shown_parts(line: str, record: dict, ranks: str) -> tuple[str, str] | None:
    """(label, text) of what a follower prints of a launcher.log line, None for nothing: with
    `ranks` "0" (or "rank:N") that rank's lines bare and the launcher's own messages (mpirun's
    errors); with "all" every line, a rank's labelled `[rank N host] `, a node's torchrun's
    `[host] `; with "node:HOST" those of HOST; with "none" nothing. The launcher's noise
    (LAUNCHER_NOISE) is never shown."""
    if ranks == "none" or LAUNCHER_NOISE.match(line):
        return None
    rank, host, text = labelled(line, record)
    if ranks == "all" or (ranks.startswith("node:") and host == ranks[5:]):
        if rank is not None:
            return f"[rank {rank} {host}] ", text
        return (f"[{host}] ", text) if host else ("", text)
    if ranks.startswith("node:"):
        return None
    if rank == int(ranks.partition(":")[2] or ranks):
        return "", text
    return ("", text) if host is None else None


def shown(line: str, record: dict, ranks: str) -> str | None:
    """A launcher.log line as a follower prints it (see shown_parts), None for nothing."""
    parts = shown_parts(line, record, ranks)
    return None if parts is None else parts[0] + parts[1]
