"""attempts.py's choices for runs that heal: the nodes of an attempt, the spares, a node back's
checks, and the script's word that its checkpoint is complete (pure logic, and real files)."""

import json
import os
import threading
import time
from types import SimpleNamespace

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import attempts, board
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.record import RunRecord
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.node_checks import rejoin_problem, rejoin_request

NAMES = ["n0", "n1", "n2", "n3"]


def test_the_spares_are_the_last_nodes_never_the_head():
    assert attempts.spares(NAMES, "n0", 1) == ["n3"]
    assert attempts.spares(NAMES, "n3", 2) == ["n1", "n2"]
    assert attempts.spares(NAMES, "n0", 0) == []


def test_a_lost_node_is_replaced_by_a_spare_not_the_world_reshuffled():
    # n1 lost from n0, n1, n2 (n3 the spare): n3 takes its place, the world keeps its size.
    assert attempts.attempt_nodes(["n0", "n2", "n3"], ["n0", "n1", "n2"], 3) == ["n0", "n2", "n3"]
    # No spare left: the nodes that are there (min_nodes decides whether that is enough).
    assert attempts.attempt_nodes(["n0", "n2"], ["n0", "n1", "n2"], 3) == ["n0", "n2"]
    # n1 back while n3 stands in for it: the world stays as it is; n1 is the spare now.
    assert attempts.attempt_nodes(NAMES, ["n0", "n2", "n3"], 3) == ["n0", "n2", "n3"]
    # A short world grows to the nodes back, in the run's order.
    assert attempts.attempt_nodes(["n0", "n1", "n2"], ["n0", "n2"], 3) == ["n0", "n1", "n2"]


def test_a_node_back_is_taken_back_only_as_the_launch_checked_it():
    node = SimpleNamespace(name="n2", address="10.0.0.3", interface="eth0", slots=1)
    good = {"runs": [], "stale": [], "interfaces": {"eth0": ["10.0.0.3"]}}
    assert rejoin_problem(node, good, "r1") is None
    assert rejoin_problem(node, dict(good, runs=[{"run_id": "r1", "pid": 7}]), "r1") is None  # its own, ended next
    assert "another run is alive on it: r2" in rejoin_problem(node, dict(good, runs=[{"run_id": "r2", "pid": 7}]), "r1")
    assert "numpy is missing" in rejoin_problem(node, dict(good, drift=["numpy is missing (spec: 2.1.0)"]), "r1")
    assert "setup recorded eth0 with 10.0.0.3" in rejoin_problem(node, dict(good, interfaces={"eth1": ["10.0.0.3"]}), "r1")
    assert rejoin_problem(node, dict(good, stale=["/opt/train.py"]), "r1") is None  # sent to it, from the head
    assert "does not take the head's ssh" in rejoin_problem(node, {"error": "timed out"}, "r1")
    checks = {"expect": {"/opt/train.py": "ab"}, "packages": {"python": "/env/bin/python", "expect": {"numpy": "2.1.0"}}}
    assert rejoin_request(checks) == {"expect": {"/opt/train.py": "ab"}, "interfaces": True,
                                      "packages": {"python": "/env/bin/python", "expect": {"numpy": "2.1.0"}}}
    assert rejoin_request(None) == {"expect": {}, "interfaces": True}


def test_the_checkpoint_is_seen_in_rank_0s_stdout_from_when_the_watch_began(tmp_path):
    workers = tmp_path / "workers"
    log = workers / "node0" / "r1_x" / "attempt_0" / "0" / "stdout.log"
    log.parent.mkdir(parents=True)
    log.write_text("TORCHFLEET_CHECKPOINT epoch=1\nepoch 2/9\n")  # before the node was back: not this one
    watch = attempts.CheckpointWatch(str(workers))
    assert not watch.seen()
    with open(log, "a", encoding="utf-8") as out:
        out.write("epoch 3/9 loss=1.0\nTORCHFLEET_CHECKPOINT")  # not ended yet: not said yet
        out.flush()
        assert not watch.seen()
        out.write(" epoch=3\n")
    assert watch.seen()
    # Another node's rank 0 (node1's first worker) never counts.
    other = attempts.CheckpointWatch(str(workers))
    assert not other.seen()
    node1 = workers / "node1" / "r1_x" / "attempt_0" / "0" / "stdout.log"
    node1.parent.mkdir(parents=True)
    node1.write_text("TORCHFLEET_CHECKPOINT epoch=4\n")
    assert not other.seen()


def test_a_rank_0_file_that_appears_after_the_watch_began_is_read_whole(tmp_path):
    workers = tmp_path / "workers"
    watch = attempts.CheckpointWatch(str(workers))
    assert not watch.seen()
    log = workers / "node0" / "r1_x" / "attempt_0" / "0" / "stdout.log"
    log.parent.mkdir(parents=True)
    log.write_text("TORCHFLEET_CHECKPOINT epoch=1\n")
    assert watch.seen()


def test_the_mark_is_a_whole_word_at_the_lines_start():
    assert attempts.is_checkpoint_mark(b"TORCHFLEET_CHECKPOINT")
    assert attempts.is_checkpoint_mark(b"TORCHFLEET_CHECKPOINT epoch=3")
    assert not attempts.is_checkpoint_mark(b"TORCHFLEET_CHECKPOINT_DIR=/shared/ckpt")
    assert not attempts.is_checkpoint_mark(b"TORCHFLEET_CHECKPOINTS written")
    assert not attempts.is_checkpoint_mark(b"saved TORCHFLEET_CHECKPOINT")


def test_the_newest_of_torchruns_attempts_is_watched_by_number(tmp_path):
    workers = tmp_path / "workers"
    for attempt, text in ((9, "TORCHFLEET_CHECKPOINT 9\n"), (10, "")):
        log = workers / "node0" / "r1_x" / f"attempt_{attempt}" / "0" / "stdout.log"
        log.parent.mkdir(parents=True)
        log.write_text(text)
    watch = attempts.CheckpointWatch(str(workers))
    assert not watch.seen()  # attempt_10 is watched (from now), not attempt_9 (sorted as text, last)
    with open(workers / "node0" / "r1_x" / "attempt_10" / "0" / "stdout.log", "a", encoding="utf-8") as out:
        out.write("TORCHFLEET_CHECKPOINT 10\n")
    assert watch.seen()


def test_the_files_a_node_back_lacks_are_the_heads_own_copies_as_the_launch_sent_them(tmp_path):
    import base64
    import hashlib

    from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.node_checks import head_copies

    script, data = tmp_path / "train.py", tmp_path / "data.txt"
    script.write_text("print('hi')\n")
    data.write_text("changed on the head since the launch\n")
    expect = {str(script): hashlib.sha1(b"print('hi')\n").hexdigest(), str(data): "0" * 40}
    found, changed = head_copies([str(script), str(data), str(tmp_path / "gone.py")], expect)
    assert found == {str(script): base64.b64encode(b"print('hi')\n").decode()}
    assert changed == [str(data), str(tmp_path / "gone.py")]


def test_which_ends_a_restart_can_help():
    from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.attempts import restart_cause
    lost = {"lost_nodes": {"n2": "2026-11-25T10:00:00+00:00"}, "failed_rank": 1, "failed_exit_code": 1}
    assert restart_cause("failed", lost, [], [], []) == "n2 stopped answering at 2026-11-25T10:00:00+00:00"
    rank = {"failed_rank": 3, "failed_host": "n1", "failed_exit_code": 137}
    assert restart_cause("failed", rank, [], [], []) == "rank 3 on n1 exited with code 137"
    assert restart_cause("failed", rank, [], [], [137]) is None  # a code the script calls final
    assert restart_cause("failed", {"rc": 1}, [], [], []) == "the launcher exited with code 1"
    for state in ("succeeded", "stopped", "timed_out"):
        assert restart_cause(state, rank, [], [], []) is None
    assert restart_cause("failed", rank, ["n2"], [], []) is None  # ranks never started: not a restart
    assert restart_cause("failed", rank, [], [{"pid": 9}], []) is None  # survivors of SIGKILL


def test_a_run_without_restarts_gets_its_one_attempt_from_its_record(supervisor_plan):
    failed = {"state": "failed", "started": "t0", "ended": "t1", "nodes": ["n0"], "world_size": 2,
              "failed_rank": 1, "failed_host": "n0", "failed_exit_code": 3, "rc": 1, "msg": "run r1 failed ..."}
    assert attempts.earlier_attempts(failed, supervisor_plan()) == [
        {"attempt": 0, "started": "t0", "ended": "t1", "nodes": ["n0"], "world_size": 2,
         "cause": "rank 1 on n0 exited with code 3", "workers": "/r/r1/workers"}]
    lost = dict(failed, state="lost", msg="run r1 is lost: its supervisor is gone")
    assert attempts.earlier_attempts(lost, supervisor_plan())[0]["cause"] == "run r1 is lost: its supervisor is gone"
    listed = [{"attempt": 0, "cause": "x"}, {"attempt": 1, "cause": "y"}]
    assert attempts.earlier_attempts(dict(failed, attempts=listed), supervisor_plan()) == listed


def test_a_restart_announces_the_run_on_its_nodes_and_yields_to_another_accounts_earlier_launch(
        supervisor_plan, tmp_path, monkeypatch):
    # The head alone, with a board of its own: the restart's look for its nodes writes the run's
    # entry there; another account's launch announced before it makes the node busy, named.
    where = tmp_path / "board"
    where.mkdir()
    where.chmod(0o1777)
    monkeypatch.setattr(board, "BOARD", str(where))
    # Not this machine's processes of runs (other tests start some): the board alone decides here.
    monkeypatch.setattr(attempts, "find_run_processes", lambda *args: [])
    monkeypatch.setattr(attempts, "end_run", lambda *args, **kwargs: ([], []))
    run = SimpleNamespace(plan=supervisor_plan(check_nodes=False), keeper=SimpleNamespace(record=RunRecord(started="t0")))
    node = SimpleNamespace(**run.plan.request.nodes[0])
    ready, busy = attempts.ready_nodes(run, [node])
    assert [n.name for n in ready] == ["n0"] and busy == {}
    assert [entry["run_id"] for entry in board.read_entries(str(where))] == ["r1"]
    board.withdraw("r1", str(where))
    other = where / "65534.tf-bobs.json"
    other.write_text(json.dumps({"run_id": "tf-bobs", "nodes": ["n0"], "world_size": 1}))
    os.chown(other, 65534, 65534)
    time.sleep(0.01)
    ready, busy = attempts.ready_nodes(run, [node])
    assert ready == [] and busy == {"n0": ["tf-bobs of nobody"]}
    assert [entry["run_id"] for entry in board.read_entries(str(where))] == ["tf-bobs"]  # its own withdrawn


def test_a_node_not_taken_back_that_is_gone_again_is_no_longer_said_to_be_back(supervisor_plan, monkeypatch):
    monkeypatch.setattr(attempts, "WAIT_EVERY", 0.01)
    monkeypatch.setattr(attempts, "node_answers", lambda *args, **kwargs: False)
    monkeypatch.setattr(attempts, "ssh_port", lambda *args: 22)
    nodes = [{"name": "n0", "address": "10.0.0.1", "slots": 1, "interface": "eth0"},
             {"name": "n1", "address": "10.0.0.2", "slots": 1, "interface": "eth0"}]
    plan = supervisor_plan(nodes=nodes, max_restarts=1, check_nodes=False)
    run = SimpleNamespace(plan=plan, nodes=[SimpleNamespace(**nodes[0])], not_taken_back={"n1": "its environment differs"},
                          back=[], grow=threading.Event())
    over = threading.Event()
    watch = threading.Thread(target=attempts.watch_left_out, args=(run, ["n1"], over))
    watch.start()
    time.sleep(0.2)
    over.set()
    watch.join(5)
    assert run.not_taken_back == {} and not run.grow.is_set()


def test_a_node_slurm_failed_is_left_out_of_the_restarts_job_and_named(supervisor_plan, monkeypatch):
    # It answers ssh (scontrol update state=down leaves it running), but a job asking for it would
    # pend for ever: under Slurm the restart takes the nodes Slurm still gives jobs to.
    nodes = [{"name": f"tf-n{i}", "address": f"10.0.0.{i}", "slots": 1, "interface": "eth0"} for i in range(3)]
    plan = supervisor_plan(nodes=nodes, max_restarts=1, check_nodes=False, scheduler="slurm", fewest_nodes=2,
                           restart_wait=0)
    run = SimpleNamespace(plan=plan, nodes=[SimpleNamespace(**node) for node in nodes], not_alive={},
                          slurm_names={"tf-n0": "n0", "tf-n1": "n1", "tf-n2": "n2"}, stop_requested=lambda: None)
    monkeypatch.setattr(attempts, "ready_nodes", lambda run, asked: (list(asked), {}))
    monkeypatch.setattr(attempts.slurm, "unusable_nodes", lambda: {"n2": "DOWN (broken)", "x9": "DRAIN"})
    assert attempts.nodes_for_restart(run) == ["tf-n0", "tf-n1"]
    run.slurm_names.pop("tf-n1")  # never in an allocation: its Slurm name is not known, so it is asked for
    monkeypatch.setattr(attempts.slurm, "unusable_nodes", lambda: {"n1": "DOWN", "n2": "DOWN (broken)"})
    assert attempts.nodes_for_restart(run) == ["tf-n0", "tf-n1"]
    run.slurm_names["tf-n1"] = "n1"
    said = attempts.nodes_for_restart(run)
    assert said.startswith("1 node(s) answered, fewer than min_nodes (2)") and \
        "; tf-n1 is DOWN in Slurm (scontrol update nodename=n1 state=resume, once it is fixed); tf-n2 is DOWN (broken) in Slurm" in said, said
