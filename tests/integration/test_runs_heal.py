"""Runs that heal, on three real containers with real mpirun, torchrun and examples/train.py: a
spare node takes a killed node's place so the world keeps its size, and a node lost to a pause
is taken back at the script's next checkpoint once it answers again, or left out, with the
reason recorded, when its environment changed meanwhile.

The cluster is the session's shared one: after every test test_faults' `restored` fixture puts
every node back running, reachable, with no run left.
"""

import json
import re
import time
import uuid

import pytest

from ready_cluster import NAME, NODES, training_result
from test_faults import (LAUNCH_TIMEOUT, RUNS, SHORT_TOLERANCE, STARTED_WITHIN, Background, checkpointed,
                         docker, head_record, left_on, pause_node, wait_until)
from test_faults import restored  # noqa: F401 pylint: disable=unused-import
from test_run_lifecycle import runs_json, torchfleet
from torchfleet import devcluster

pytestmark = pytest.mark.cluster
SITE = "/opt/torchfleet/envs/torchfleet/lib/python3.11/site-packages"


def healing_run(cluster, run_id, epochs, *extra):
    """examples/train.py with a checkpoint after every epoch (about 5 s each), one worker a node,
    in the background."""
    return Background(cluster.popen_playbook(
        "launch.yml", "-e", "script=examples/train.py", "-e", "nproc_per_node=1", "-e", f"run_id={run_id}",
        "-e", f"launch_timeout={LAUNCH_TIMEOUT * 5}", *extra,
        "-e", json.dumps({"script_args": ["--use-syn", "--epochs", str(epochs), "--steps-per-epoch", "5", "--sleep", "0.8", "--no-wandb",
                                          "--out-dir", f"/tmp/{run_id}"]})))


def rank0_epochs(run_id, attempt):
    """The epochs rank 0 ended in `attempt` ({epoch: times}), from its own stdout on the head."""
    workers = f"{RUNS}/{run_id}/workers" + (f".{attempt}" if attempt else "")
    found = docker("exec", NODES[0], "sh", "-c", f"cat {workers}/node0/*/attempt_0/0/stdout.log").stdout
    return [int(epoch) for epoch in re.findall(r"^epoch (\d+)/", found, re.M)], found


def test_a_spare_takes_a_killed_nodes_place_and_the_world_keeps_its_size(cluster):
    run_id = f"tf-spare-{uuid.uuid4().hex[:8]}"
    launch = healing_run(cluster, run_id, 6, "-e", "max_restarts=1", "-e", "spare_nodes=1")
    try:
        wait_until(lambda: checkpointed(run_id), STARTED_WITHIN, "the first checkpoint", launch)
        first = head_record(run_id)
        assert (first["nodes"], first["world_size"]) == (NODES[:2], 2), first  # NODES[2] is the spare
        assert docker("kill", NODES[1]).returncode == 0
        rc, output, _took = launch.wait(LAUNCH_TIMEOUT * 5)
    finally:
        launch.kill()
    assert rc == 0, output[-3000:]
    final = head_record(run_id)
    assert (final["state"], final["world_size"], final["restarts"]) == ("succeeded", 2, 1), final["msg"]
    lost, swapped = final["attempts"]
    assert f"{NODES[1]} died at " in lost["cause"], final["attempts"]
    assert (swapped["nodes"], swapped["joined"], swapped["left"]) == ([NODES[0], NODES[2]], [NODES[2]], [NODES[1]])
    listed = runs_json(cluster)[run_id]["attempts"][1]
    assert (listed["joined"], listed["left"]) == ([NODES[2]], [NODES[1]]), listed
    result = training_result(docker("exec", NODES[0], "cat", f"{RUNS}/{run_id}/launcher.log").stdout + output)
    assert result["world_size"] == 2 and result["resumed_from_epoch"] >= 1, result
    # The spare is the run's as every other node: its ranks' output is followed from its own files.
    every = torchfleet(cluster, "logs", run_id, "--all-ranks")
    assert every.returncode == 0, every.stderr[-2000:]
    assert f"[rank 1 {NODES[2]}] TORCHFLEET_RANK rank=1 " in every.stdout, every.stdout[-3000:]
    assert f"[{NODES[2]}] torchfleet: its worker logs could not be read" not in every.stdout, every.stdout[-3000:]


def test_a_supervisor_killed_with_its_spare_in_leaves_nothing_on_any_node(cluster):
    # Issue 51: the spare is the run's as the first attempt's nodes are: the guardian ends the
    # run there too when the supervisor dies.
    run_id = f"tf-spkill-{uuid.uuid4().hex[:8]}"
    launch = healing_run(cluster, run_id, 40, "-e", "max_restarts=1", "-e", "spare_nodes=1")
    try:
        wait_until(lambda: checkpointed(run_id), STARTED_WITHIN, "the first checkpoint", launch)
        assert docker("kill", NODES[1]).returncode == 0
        wait_until(lambda: head_record(run_id).get("restarts") == 1 and left_on(NODES[2]), 120,
                   "the spare's ranks", launch)
        killed = docker("exec", NODES[0], "pkill", "-KILL", "-u", "torchfleet", "-f",
                        f"_on_node.supervisor {RUNS}/{run_id}")
        assert killed.returncode == 0, killed.stderr
        at = time.monotonic()
        wait_until(lambda: not left_on(NODES[0]) and not left_on(NODES[2]), 60, "nothing of the run on any node")
        print(f"supervisor SIGKILLed with the spare in: nothing of the run left {time.monotonic() - at:.1f} s later")
        launch.wait(60)
    finally:
        launch.kill()
    record = head_record(run_id)
    assert record["state"] == "lost" and "its guardian ended the run" in record["msg"], record["msg"]


def test_a_node_lost_to_a_pause_is_taken_back_at_the_next_checkpoint_redoing_nothing(cluster):
    # One restart allowed: the loss spends it; growing back spends nothing, so the run still succeeds.
    run_id = f"tf-grow-{uuid.uuid4().hex[:8]}"
    launch = healing_run(cluster, run_id, 16, "-e", "max_restarts=1", "-e", "min_nodes=2",
                         "-e", f"launch_heartbeat_timeout={SHORT_TOLERANCE}", "-e", "rejoin_after=3")
    try:
        wait_until(lambda: checkpointed(run_id), STARTED_WITHIN, "the first checkpoint", launch)
        assert pause_node(NODES[2]).returncode == 0
        try:
            wait_until(lambda: head_record(run_id).get("restarts") == 1, SHORT_TOLERANCE + 60, "the shrink", launch)
        finally:
            assert docker("unpause", NODES[2]).returncode == 0
        wait_until(lambda: head_record(run_id).get("restarts") == 2, 120, "the growth back", launch)
        rc, output, _took = launch.wait(LAUNCH_TIMEOUT * 5)
    finally:
        launch.kill()
    assert rc == 0, output[-3000:]
    final = head_record(run_id)
    assert (final["state"], final["world_size"], final["restarts"]) == ("succeeded", 3, 2), final["msg"]
    lost, short, grown = final["attempts"]
    assert f"{NODES[2]} stopped answering at " in lost["cause"], final["attempts"]
    assert short["nodes"] == NODES[:2] and short["cause"] == f"{NODES[2]} back (grown at a checkpoint)", short
    assert (grown["nodes"], grown["joined"]) == (NODES, [NODES[2]]), grown
    # Nothing redone: the grown attempt starts at the epoch after the short one's last, which
    # its checkpoint holds.
    done, _said = rank0_epochs(run_id, 1)
    again, said = rank0_epochs(run_id, 2)
    assert done and again and again[0] == done[-1] + 1, (done, again)
    assert f"resumed from /tmp/{run_id}/checkpoint.pt at epoch {done[-1]}" in said, said[:2000]
    result = training_result(docker("exec", NODES[0], "cat", f"{RUNS}/{run_id}/launcher.log").stdout + output)
    assert result["world_size"] == 3 and len(result["losses"]) == 16, result


def test_a_node_back_with_another_environment_is_not_taken_back_and_the_record_says_why(cluster):
    run_id = f"tf-nogrow-{uuid.uuid4().hex[:8]}"
    moved = docker("exec", NODES[2], "sh", "-c", f"ls -d {SITE}/tqdm-*.dist-info").stdout.strip()
    assert moved, "tqdm is in the test cluster's environment (ready_cluster.TEST_PACKAGES)"
    launch = healing_run(cluster, run_id, 12, "-e", "max_restarts=1", "-e", "min_nodes=2",
                         "-e", f"launch_heartbeat_timeout={SHORT_TOLERANCE}", "-e", "rejoin_after=3")
    try:
        wait_until(lambda: checkpointed(run_id), STARTED_WITHIN, "the first checkpoint", launch)
        # The environment changes on the node while it is away (a package removed by hand).
        assert docker("exec", NODES[2], "mv", moved, f"{moved}.away").returncode == 0
        assert pause_node(NODES[2]).returncode == 0
        try:
            wait_until(lambda: head_record(run_id).get("restarts") == 1, SHORT_TOLERANCE + 60, "the shrink", launch)
        finally:
            assert docker("unpause", NODES[2]).returncode == 0
        wait_until(lambda: NODES[2] in (head_record(run_id).get("not_taken_back") or {}), 90,
                   "the node back named, not taken back", launch)
        rc, output, _took = launch.wait(LAUNCH_TIMEOUT * 5)
    finally:
        launch.kill()
        docker("exec", NODES[2], "mv", f"{moved}.away", moved)
    assert rc == 0, output[-3000:]
    final = head_record(run_id)
    assert (final["state"], final["world_size"], final["restarts"]) == ("succeeded", 2, 1), final["msg"]
    why = final["not_taken_back"][NODES[2]]
    assert "Python environment is no longer what setup installed" in why and "tqdm is missing" in why, why
    assert "not_taken_back" in runs_json(cluster)[run_id], runs_json(cluster)[run_id]


def test_a_run_launched_with_a_node_down_starts_on_the_others_and_grows_to_it(cluster):
    run_id = f"tf-late-{uuid.uuid4().hex[:8]}"
    # Down (stopped) before the launch; the `restored` fixture starts it if the test does not.
    assert docker("stop", "--time", "1", NODES[2]).returncode == 0
    launch = healing_run(cluster, run_id, 12, "-e", "max_restarts=1", "-e", "min_nodes=2", "-e", "rejoin_after=3")
    try:
        wait_until(lambda: checkpointed(run_id), STARTED_WITHIN, "the first checkpoint", launch)
        first = head_record(run_id)
        assert (first["nodes"], first["world_size"]) == (NODES[:2], 2), first
        assert devcluster.restore_node(NAME, 2) == [f"started {NODES[2]}"]
        wait_until(lambda: head_record(run_id).get("restarts") == 1, 120, "the growth", launch)
        rc, output, _took = launch.wait(LAUNCH_TIMEOUT * 5)
    finally:
        launch.kill()
    assert rc == 0, output[-3000:]
    assert "did not answer" in output, output[-3000:]  # the launch's warning
    final = head_record(run_id)
    assert (final["state"], final["world_size"], final["restarts"]) == ("succeeded", 3, 1), final["msg"]
    short, grown = final["attempts"]
    assert short["cause"] == f"{NODES[2]} back (grown at a checkpoint)" and grown["joined"] == [NODES[2]], final
    result = training_result(docker("exec", NODES[0], "cat", f"{RUNS}/{run_id}/launcher.log").stdout + output)
    assert result["world_size"] == 3 and len(result["losses"]) == 12, result
