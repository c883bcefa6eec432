"""A node that merely pauses (docker pause: a switch failover, a swap storm) for half the
tolerance, on three real containers: it costs a healthy run nothing, with restarts allowed or not.

The cluster and the helpers are test_faults.py's; its `restored` fixture puts every node back after
each test.
"""

import json
import time
import uuid

from ready_cluster import NODES, training_result
from test_faults import (LAUNCH_TIMEOUT, RUNS, STARTED_WITHIN, Background, checkpointed, docker, head_record,
                         pause_node, wait_until)
from test_faults import restored  # noqa: F401 pylint: disable=unused-import


def blip_run(cluster, run_id, pause, *extra):
    """A 12-epoch checkpointing run on three nodes, NODES[2] paused for `pause` seconds after the
    first checkpoint and resumed: (rc, output, the record)."""
    launch = Background(cluster.popen_playbook(
        "launch.yml", "-e", "script=examples/train.py", "-e", "nproc_per_node=1", "-e", f"run_id={run_id}",
        "-e", f"launch_timeout={LAUNCH_TIMEOUT * 4}", *extra,
        "-e", json.dumps({"script_args": ["--use-syn", "--epochs", "12", "--steps-per-epoch", "5", "--sleep", "0.8", "--no-wandb",
                                          "--out-dir", f"/tmp/{run_id}"]})))
    try:
        wait_until(lambda: checkpointed(run_id), STARTED_WITHIN, "the first checkpoint", launch)
        assert pause_node(NODES[2]).returncode == 0
        time.sleep(pause)
        assert docker("unpause", NODES[2]).returncode == 0
        rc, output, _since_start = launch.wait(LAUNCH_TIMEOUT * 4)
    finally:
        launch.kill()
    return rc, output, head_record(run_id)


def test_a_node_paused_for_half_the_tolerance_costs_a_healthy_run_nothing(cluster):
    # Issue 35: 15 s of silence (a switch failover, a swap storm) against the default tolerance of
    # 30 s, no restarts allowed: the run waits, as mpirun and torchrun do, and ends well with its
    # full world. The head's launch lock under the old predictable name in /tmp, taken first by
    # another account, stops nothing: the lock is in the training account's own directory now.
    uid = docker("exec", NODES[0], "id", "-u", "torchfleet").stdout.strip()
    squatted = f"/tmp/torchfleet-launch-{uid}.lock"
    assert docker("exec", NODES[0], "sh", "-c", f"umask 077; : > {squatted}").returncode == 0  # root's
    run_id = f"tf-blip-{uuid.uuid4().hex[:8]}"
    try:
        rc, output, final = blip_run(cluster, run_id, 15)
    finally:
        docker("exec", NODES[0], "rm", "-f", squatted)
    assert rc == 0, output[-3000:]
    assert (final["state"], final["world_size"], final.get("lost_nodes")) == ("succeeded", 3, None), final["msg"]
    result = training_result(docker("exec", NODES[0], "cat", f"{RUNS}/{run_id}/launcher.log").stdout + output)
    assert (result["world_size"], result["resumed_from_epoch"]) == (3, None), result
    lock = docker("exec", "-u", "torchfleet", NODES[0], "stat", "-c", "%a %U",
                  "/home/torchfleet/.local/state/torchfleet").stdout.split()
    assert lock == ["700", "torchfleet"], lock


def test_a_node_paused_for_half_the_tolerance_costs_no_restart(cluster):
    # The same blip with a restart allowed (tolerance 16 s, paused 8 s): no attempt is ended, no
    # epoch redone.
    run_id = f"tf-bliprs-{uuid.uuid4().hex[:8]}"
    rc, output, final = blip_run(cluster, run_id, 8, "-e", "max_restarts=1", "-e", "min_nodes=2",
                                 "-e", "launch_heartbeat_timeout=16")
    assert rc == 0, output[-3000:]
    assert (final["state"], final["restarts"], final["world_size"]) == ("succeeded", 0, 3), final["msg"]
    assert [attempt["attempt"] for attempt in final["attempts"]] == [0], final["attempts"]
    result = training_result(docker("exec", NODES[0], "cat", f"{RUNS}/{run_id}/launcher.log").stdout + output)
    assert (result["world_size"], result["resumed_from_epoch"]) == (3, None), result
