"""What a launch asks of each node (`python3 -S -m _on_node.probe`, a JSON request on stdin): one
answer made of the jobs of this package's files (processes, node_files, log_ends, packages,
interfaces, stacks, the board).

The launch module runs on the head. It calls probe() there, and runs this same program on every
other node over the cluster's own ssh (`python -c <these files>`, see ssh_to_nodes.program), in
parallel, the way mpirun reaches the nodes a moment later. So these files import only the
standard library and each other, nothing of Ansible.
"""

from __future__ import annotations

import base64
import json
import sys

from .board import BoardFull, announce, in_the_way, others_alive, own_entry, skipped_phrases, sweep_own, withdraw
from .interfaces import interface_addresses
from .log_ends import log_tail
from .node_files import file_sha1, write_file
from .packages import environment_drift
from .processes import end_run, find_run_processes
from .stacks import take


def board_answer(entry: dict | None, share: bool) -> dict:
    """Announce `entry` (none in check mode), then read the others: {announced, others}, the
    others being those this launch must yield to (board.in_the_way), its entry withdrawn then,
    unless `share`; or {board_full: why}. `board_skipped`: the entries it could not count
    (board.skipped_phrases), for the launch to name."""
    skipped: list = []
    answer = _board_answer(entry, share, skipped)
    if skipped:
        answer["board_skipped"] = skipped_phrases(skipped)
    return answer


def _board_answer(entry: dict | None, share: bool, skipped: list) -> dict:
    if not entry:
        return {"announced": None, "others": others_alive(skipped=skipped)}
    sweep_own()
    try:
        announced = announce(entry)
    except BoardFull as full:
        return {"announced": None, "others": [], "board_full": str(full)}
    others = others_alive(skipped=skipped)
    mine = own_entry(entry["run_id"]) if announced else None
    if mine is None:
        return {"announced": announced, "others": others}
    blocking = in_the_way(others, mine)
    if blocking and not share:
        withdraw(entry["run_id"])
        return {"announced": None, "others": blocking}
    return {"announced": True, "others": blocking}


def probe(request: dict) -> dict:
    """One node's answer. With `write` ({path: base64 content}), writes those files and names
    them; with `expect` ({path: SHA-1}), the runs alive on the node and which of those files are
    missing or differ; with `stop` ({run_id, grace}), ends what is left of that run here and
    names what was stopped and what survived; with `tail` ({pattern, lines}), the end of that log;
    with `packages` ({python, expect}), how that environment differs from what setup installed;
    with `interfaces` (true), the node's interfaces and their IPv4 addresses; with `board`
    ({entry, share}), other accounts' runs alive here (`others`), and this run's entry written
    unless there are some and `share` is false (`announced`: false where the node has no board);
    with `withdraw` (a run id), this account's entry for it removed; with `stacks` ({run_id,
    run_dir, attempt}), the Python stacks of that attempt's ranks here (stacks.take).
    An empty request only shows that the node answers."""
    answer = {}
    if "board" in request:
        answer.update(board_answer(**request["board"]))
    if "withdraw" in request:
        withdraw(request["withdraw"])
    if "write" in request:
        for path, content in sorted(request["write"].items()):
            write_file(path, base64.b64decode(content))
        answer["written"] = sorted(request["write"])
    if "expect" in request:
        answer["runs"] = find_run_processes()
        answer["stale"] = sorted(path for path, sha1 in request["expect"].items()
                                 if file_sha1(path) != sha1)
    if "stop" in request:
        answer["stopped"], answer["survivors"] = end_run(request["stop"]["run_id"], request["stop"]["grace"])
    if "tail" in request:
        answer["tail"] = log_tail(request["tail"]["pattern"], request["tail"]["lines"])
    if "packages" in request:
        answer["drift"] = environment_drift(request["packages"]["python"], request["packages"]["expect"])
    if request.get("interfaces"):
        answer["interfaces"] = interface_addresses()
    if "stacks" in request:
        answer["stacks"] = take(**request["stacks"])
    return answer


def main() -> None:
    try:
        answer = probe(json.load(sys.stdin))
    except (OSError, ValueError) as err:
        answer = {"error": f"{type(err).__name__}: {err}"}
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
