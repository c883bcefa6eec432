"""Which old runs are pruned, and what pruning a node removes and keeps."""

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils import _run_prune as prune
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import record as rr

DAY = 86400
NOW = 1_800_000_000.0


def listed(*states):
    """Records newest first, one a day apart: the first started today."""
    return [{"run_id": f"r{index}", "state": state, "started_at": NOW - index * DAY}
            for index, state in enumerate(states)]


def test_keep_counts_every_run_but_prunes_only_ended_ones():
    runs = listed("running", "succeeded", "failed", "lost", "stopped", "timed_out")
    assert prune.prunable(runs, keep=2, now=NOW) == ["r2", "r4", "r5"]
    assert prune.prunable(runs, keep=0, now=NOW) == ["r1", "r2", "r4", "r5"]
    assert prune.prunable(runs, keep=10, now=NOW) == []


def test_older_than_alone_and_with_keep():
    runs = listed("succeeded", "succeeded", "succeeded", "failed")
    assert prune.prunable(runs, older_than_days=1.5, now=NOW) == ["r2", "r3"]
    assert prune.prunable(runs, keep=3, older_than_days=1.5, now=NOW) == ["r3"]


def test_nothing_is_pruned_unasked():
    with pytest.raises(ValueError, match="give keep"):
        prune.prunable(listed("succeeded"))


def _run_dir(log_dir, run_id, state):
    path = log_dir / run_id
    (path / "workers").mkdir(parents=True)
    (path / "workers" / "log").write_text("a rank's output\n")
    if state:
        rr.write_state(str(path), {"run_id": run_id, "state": state})
    return path


def test_a_node_removes_ended_runs_and_keeps_live_ones(tmp_path):
    _run_dir(tmp_path, "done", "succeeded")
    _run_dir(tmp_path, "no-record", None)  # another node's: ranks' logs, no record
    running = _run_dir(tmp_path, "busy", "running")
    # A process of a run alive here (its record ended, or it has none): kept.
    alive = _run_dir(tmp_path, "alive", "failed")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               env={**os.environ, "TORCHFLEET_RUN_ID": "alive"})
    try:
        time.sleep(0.2)
        ids = ["done", "no-record", "busy", "alive", "absent"]
        assert prune.prune_here(str(tmp_path), ids, check_mode=True)[0] == ["done", "no-record"]
        assert (tmp_path / "done").is_dir()  # check mode changes nothing
        removed, kept = prune.prune_here(str(tmp_path), ids)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert removed == ["done", "no-record"]
    assert not (tmp_path / "done").exists() and not (tmp_path / "no-record").exists()
    assert running.is_dir() and alive.is_dir()
    assert "its record says lost: stop it first" in kept["busy"]  # no supervisor here and "alive on this node" in kept["alive"]


@pytest.mark.parametrize("run_id", ["", ".", "..", "a/b", ".hidden", "a..b", "-x", "a b", "x" * 65])
def test_what_is_not_a_run_id(run_id):
    assert prune.bad_run_id(run_id)


def test_a_run_with_a_log_dir_of_its_own_is_pruned_where_it_is_and_leaves_the_index(tmp_path):
    index, elsewhere = tmp_path / "index", tmp_path / "shared"
    run_dir = _run_dir(elsewhere, "own", "failed")
    rr.index_run(str(index), "own", str(run_dir))
    removed, kept = prune.prune_here(str(tmp_path / "runs"), ["own"], run_dirs={"own": str(run_dir)}, index=str(index))
    assert removed == ["own"] and not run_dir.exists() and not os.path.lexists(index / "own") and kept == {}
    # A directory not named for the run is never removed for it.
    other = _run_dir(elsewhere, "other", "failed")
    removed, kept = prune.prune_here(str(tmp_path / "runs"), ["x"], run_dirs={"x": str(other)})
    assert removed == [] and other.is_dir() and "not named for the run" in kept["x"]


def test_a_run_directory_another_node_removed_first_is_no_error(tmp_path, monkeypatch):
    run_dir = _run_dir(tmp_path, "shared", "succeeded")
    (run_dir / "workers" / "node1").mkdir(parents=True)
    real_unlink = os.unlink

    def raced(path, *args, **kwargs):  # another node's prune of the same shared directory got there first
        real_unlink(path, *args, **kwargs)
        raise FileNotFoundError(path)
    monkeypatch.setattr(os, "unlink", raced)
    assert prune.prune_here(str(tmp_path), ["shared"])[0] == ["shared"]
    assert not run_dir.exists()


@pytest.mark.parametrize("run_id", ["tf-20261128-101502-ab12cd", "a", "v1.2_run-3"])
def test_what_is_a_run_id(run_id):
    assert not prune.bad_run_id(run_id)


def test_a_record_planted_in_a_shared_log_dir_naming_another_directory_prunes_nothing_of_it(tmp_path):
    # Another account (nobody) writes a record in a log_dir every account may write, naming a
    # directory of this account's; this account's listing and prune leave that directory.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    precious = tmp_path / "data" / "precious"
    (precious / "checkpoints").mkdir(parents=True)
    planted = shared / "evil"
    planted.mkdir()
    rr.write_state(str(planted), {"run_id": "precious", "state": "failed", "log_dir": str(precious),
                                  "started_at": 1})
    subprocess.run(["chown", "-R", "65534:65534", str(planted)], check=True)
    assert rr.list_runs(str(shared)) == []
    removed, kept = prune.prune_here(str(shared), ["evil"], run_dirs={"evil": str(planted)})
    assert removed == [] and planted.is_dir() and "not a directory of this account's" in kept["evil"]
    # A link named for the run, to a directory of this account's, is not followed either.
    (shared / "linked").symlink_to(precious)
    removed, kept = prune.prune_here(str(shared), ["linked"])
    assert removed == [] and (precious / "checkpoints").is_dir() and "left alone" in kept["linked"]
