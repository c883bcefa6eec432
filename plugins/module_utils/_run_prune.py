"""Old runs removed on request: which ones (decided on the head, from their records) and their
directories on a node (torchrun_prune). Nothing is pruned unasked, and never a run that may still
be alive."""

from __future__ import annotations

import os
import shutil
import stat
import time

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import RUN_ID
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.processes import find_run_processes
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.record import ENDED, read_state, unindex_run


def prunable(records, keep: int | None = None, older_than_days: float | None = None,
             now: float | None = None) -> list[str]:
    """The run ids to prune of `records` (newest first, as torchrun_run_info lists them): ended
    runs beyond the `keep` newest runs and started more than `older_than_days` ago (each only if
    given; at least one must be). A run running or lost is never among them."""
    if keep is None and older_than_days is None:
        raise ValueError("give keep (the newest runs to keep) or older_than_days, or both")
    now = time.time() if now is None else now
    chosen = []
    for index, record in enumerate(records):
        if record.get("state") not in ENDED or (keep is not None and index < keep):
            continue
        if older_than_days is not None and now - (record.get("started_at") or now) < older_than_days * 86400:
            continue
        chosen.append(record["run_id"])
    return chosen


def bad_run_id(run_id: str) -> bool:
    return not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id)


def _gone_meanwhile(_function, _path, error) -> None:
    """rmtree's errors: a file another node's prune removed first (a log_dir every node shares)
    is no error; any other is."""
    if not isinstance(error[1], FileNotFoundError):
        raise error[1]


def prune_here(log_dir: str, run_ids, check_mode: bool = False, run_dirs=None,
               index: str | None = None) -> tuple[list, dict]:
    """(the run directories removed on this node, {run id: why kept}): each under `log_dir`, or
    where `run_dirs` ({run id: its directory}) says for a run with a log_dir of its own. A run
    whose record here does not say it ended, or with a process alive here, is kept. Its link in
    the account's `index` of runs (record.runs_index) goes with it."""
    alive = {proc["run_id"] for proc in find_run_processes(set(run_ids))}
    removed, kept = [], {}
    for run_id in run_ids:
        path = os.path.expanduser(str((run_dirs or {}).get(run_id) or os.path.join(log_dir, run_id)))
        if os.path.basename(os.path.normpath(path)) != run_id:
            kept[run_id] = f"its directory {path} is not named for the run: left alone"
            continue
        if not os.path.exists(path):  # gone already (a dangling link too): only its index entry
            if index and not check_mode:
                unindex_run(index, run_id)
            continue
        # Never through a link, never another account's (a record in a log_dir every account
        # writes may name any directory: docs/security.md).
        try:
            found = os.lstat(path)
        except FileNotFoundError:  # another node's prune of a shared log_dir got there first
            continue
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
            kept[run_id] = f"{path} is not a directory of this account's: left alone"
            continue
        record = read_state(path)
        if record is not None and record.get("state") not in ENDED:
            kept[run_id] = f"its record says {record.get('state')}: stop it first"
        elif run_id in alive:
            kept[run_id] = "a process of it is alive on this node: stop it first"
        else:
            if not check_mode:
                shutil.rmtree(path, onerror=_gone_meanwhile)
                if index:
                    unindex_run(index, run_id)
            removed.append(run_id)
    return removed, kept
