"""Restarts on three real containers, with real mpirun and torchrun: a node killed with a restart
allowed (over ssh and under Slurm), Ctrl-C while a restart waits and the restart by hand after it,
a supervisor that fails mid-run, and a restart refused while another run holds the nodes.

The cluster and the helpers are test_faults.py's; its `restored` fixture puts every node back after
each test.
"""

import json
import os
import re
import signal
import subprocess
import time
import uuid

from ready_cluster import NODES, REPO, training_result
from test_faults import (LAUNCH_TIMEOUT, LONG_RUN, RUNS, STARTED_WITHIN, Background, checkpointed, checkpointing_run,
                         docker, head_record, left_on, restore, start_long_run, wait_until)
from test_faults import restored  # noqa: F401 pylint: disable=unused-import
from test_run_lifecycle import Attached, runs_json, torchfleet, torchfleet_argv


def kill_a_node_mid_run(cluster, run_id, *extra, fault=("docker", "kill", NODES[2])):
    """A checkpointing run allowed one restart on two nodes, NODES[2] killed (or `fault` run)
    after its first checkpoint: (rc, output, seconds from the kill to the restart, the record
    before the kill)."""
    launch = Background(cluster.popen_playbook(
        "launch.yml", "-e", "script=examples/train.py", "-e", "nproc_per_node=1", "-e", f"run_id={run_id}",
        "-e", "max_restarts=1", "-e", "min_nodes=2", "-e", f"launch_timeout={LAUNCH_TIMEOUT * 4}",
        "-e", json.dumps({"script_args": checkpointing_run(run_id)}), *extra))
    try:
        wait_until(lambda: checkpointed(run_id), STARTED_WITHIN, "the first checkpoint", launch)
        before = head_record(run_id)
        assert subprocess.run(fault, capture_output=True, check=False).returncode == 0
        killed = time.monotonic()
        wait_until(lambda: head_record(run_id).get("restarts") == 1, 120, "the restart", launch)
        restarted = time.monotonic() - killed
        rc, output, _since_start = launch.wait(LAUNCH_TIMEOUT * 4)
    finally:
        launch.kill()
    return rc, output, restarted, before


def test_a_node_killed_with_a_restart_allowed_resumes_on_the_two_nodes_left(cluster):
    # Issue 27's first case: the container killed outright. Its processes die with it, so its
    # session with the head closes: a death, proven at once (issue 35), not waited out as silence.
    run_id = f"tf-killed-{uuid.uuid4().hex[:8]}"
    rc, output, restarted, _before = kill_a_node_mid_run(cluster, run_id)
    print(f"killed: restarted {restarted:.1f} s later")
    assert rc == 0, output[-3000:]
    final = head_record(run_id)
    assert (final["state"], final["restarts"], final["world_size"]) == ("succeeded", 1, 2), final["msg"]
    assert f"{NODES[2]} died at " in final["attempts"][0]["cause"], final["attempts"]
    listed = runs_json(cluster)[run_id]
    assert f"{NODES[2]} died at " in listed["attempts"][0]["cause"] and NODES[2] in listed["lost_nodes"], listed
    result = training_result(docker("exec", NODES[0], "cat", f"{RUNS}/{run_id}/launcher.log").stdout + output)
    assert result["world_size"] == 2 and result["resumed_from_epoch"] >= 1, result
    for node in NODES[:2]:
        assert left_on(node) == [], node


def test_a_node_killed_under_slurm_with_a_restart_allowed_resumes_in_a_new_job_without_it(cluster):
    # Issue 27, point 5: the restart is a new Slurm job of the nodes that answer, --exclude naming
    # the node lost (Slurm itself holds the dead node's part of the old job for SlurmdTimeout).
    run_id = f"tf-slkilled-{uuid.uuid4().hex[:8]}"
    rc, output, restarted, before = kill_a_node_mid_run(cluster, run_id, "-e", "scheduler=slurm")
    first_job = before["job_id"]
    print(f"killed under Slurm: restarted {restarted:.1f} s later")
    assert rc == 0, output[-3000:]
    final = head_record(run_id)
    assert (final["state"], final["restarts"], final["world_size"]) == ("succeeded", 1, 2), final["msg"]
    first, second = final["attempts"]
    assert f"{NODES[2]} died at " in first["cause"], final["attempts"]
    assert first["job_id"] == first_job != second["job_id"], final["attempts"]
    assert second["nodes"] == NODES[:2] and second["job_nodes"] == ["node0", "node1"], second
    job = docker("exec", NODES[0], "scontrol", "show", "job", "-o", second["job_id"]).stdout
    assert "ExcNodeList=node2 " in job, job
    result = training_result(docker("exec", NODES[0], "cat", f"{RUNS}/{run_id}/launcher.log").stdout + output)
    assert result["world_size"] == 2 and result["resumed_from_epoch"] >= 1, result
    for node in NODES[:2]:
        assert left_on(node) == [], node
    # Back, the node's slurmd ends the old job's part there: nothing stays queued.
    restore(cluster)
    wait_until(lambda: not docker("exec", NODES[0], "squeue", "-h").stdout.strip(), 120, "an empty queue")


def test_a_node_slurm_fails_mid_run_is_left_out_of_the_restarts_job_and_named(cluster):
    # Issue 51: node2's slurmd dies and Slurm downs the node while it still answers ssh; Slurm ends
    # the job NODE_FAIL (not requeued: the restarts are torchfleet's) and gives node2 no new job
    # (ReturnToService=2 would take it back only when its slurmd registers), so the restart's job
    # leaves it out and the cause says Slurm's word and the node.
    run_id = f"tf-slfail-{uuid.uuid4().hex[:8]}"
    fail = (f"docker exec {NODES[2]} pkill -x slurmd && "
            f"docker exec {NODES[0]} scontrol update nodename=node2 state=down reason=tf-test")
    try:
        rc, output, restarted, _before = kill_a_node_mid_run(cluster, run_id, "-e", "scheduler=slurm",
                                                             fault=("sh", "-c", fail))
        print(f"node2 failed in Slurm: restarted {restarted:.1f} s later")
        assert rc == 0, output[-3000:]
        final = head_record(run_id)
        assert (final["state"], final["restarts"], final["world_size"]) == ("succeeded", 1, 2), final["attempts"]
        first, second = final["attempts"]
        assert re.search(r"^Slurm ended job \d+: NODE_FAIL.*: a node of its allocation failed .*node2 is DOWN\S* "
                         r"\(tf-test\)", first["cause"]), first["cause"]
        assert second["nodes"] == NODES[:2] and second["job_nodes"] == ["node0", "node1"], second
        job = docker("exec", NODES[0], "scontrol", "show", "job", "-o", second["job_id"]).stdout
        assert "ExcNodeList=node2 " in job and "Requeue=0 " in job, job
        for node in NODES:
            assert left_on(node) == [], node
    finally:
        docker("exec", "-d", NODES[2], "/usr/sbin/slurmd")
        docker("exec", NODES[0], "scontrol", "update", "nodename=node2", "state=resume")
    wait_until(lambda: not docker("exec", NODES[0], "squeue", "-h").stdout.strip(), 120, "an empty queue")


def test_ctrl_c_while_a_restart_waits_stops_the_run_and_restart_by_hand_resumes_it(cluster):
    # Every node required (min_nodes: all): with one killed, the restart waits for it; Ctrl-C of
    # the attached `torchfleet launch` then stops the run and no attempt follows. With the node
    # back, `torchfleet restart RUN_ID` goes on as attempt 1, on every node, from the checkpoint.
    run_id = f"tf-waits-{uuid.uuid4().hex[:8]}"
    launch = Attached(cluster, "examples/train.py", "-e", "nproc_per_node=1", "-e", f"run_id={run_id}",
                      "--max-restarts", "1", "-e", "restart_wait=600", "--", *checkpointing_run(run_id))
    try:
        wait_until(lambda: checkpointed(run_id), STARTED_WITHIN, "the first checkpoint")
        assert docker("kill", NODES[2]).returncode == 0
        wait_until(lambda: "waiting for 3 node(s) to answer" in (head_record(run_id).get("msg") or ""), 120,
                   "the restart waiting for the node killed")
        os.killpg(launch.process.pid, signal.SIGINT)
        rc = launch.wait(120)
    finally:
        launch.kill()
    assert rc == 130, launch.errors[-20:]
    stopped = head_record(run_id)
    assert (stopped["state"], stopped["restarts"]) == ("stopped", 0), stopped["msg"]
    assert "no restart: stopped while waiting for the nodes of a restart" in stopped["msg"]
    for node in NODES[:2]:
        assert left_on(node) == [], node

    restore(cluster)  # the node back
    restarted = torchfleet(cluster, "restart", run_id, timeout=600)
    assert restarted.returncode == 0, (restarted.stdout[-3000:], restarted.stderr[-3000:])
    final = head_record(run_id)
    assert (final["state"], final["restarts"], final["world_size"]) == ("succeeded", 1, 3), final["msg"]
    assert [attempt["attempt"] for attempt in final["attempts"]] == [0, 1]
    assert f"{NODES[2]} died at " in final["attempts"][0]["cause"]
    result = training_result(restarted.stdout)
    assert result["world_size"] == 3 and result["resumed_from_epoch"] >= 1, result
    for node in NODES:
        assert left_on(node) == [], node


def test_a_supervisor_sigkilled_then_restarted_at_once_resumes_from_its_checkpoint(cluster):
    # Issue 51: the restart by hand, typed the moment the supervisor died, waits for the old
    # guardian's clean-up (which ends every process of the run id) instead of being ended by it.
    run_id = f"tf-svkill-{uuid.uuid4().hex[:8]}"
    detached = torchfleet(cluster, "launch", "examples/train.py", "-e", "nproc_per_node=1", "-e", f"run_id={run_id}",
                          "--detach", "--", *checkpointing_run(run_id))
    assert detached.returncode == 0, detached.stderr[-3000:]
    wait_until(lambda: checkpointed(run_id), STARTED_WITHIN, "the first checkpoint")
    killed = docker("exec", NODES[0], "pkill", "-KILL", "-u", "torchfleet", "-f", f"_on_node.supervisor {RUNS}/{run_id}")
    assert killed.returncode == 0, killed.stderr
    restarted = torchfleet(cluster, "restart", run_id, timeout=600)
    assert restarted.returncode == 0, (restarted.stdout[-3000:], restarted.stderr[-3000:])
    final = head_record(run_id)
    assert (final["state"], final["restarts"], final["world_size"]) == ("succeeded", 1, 3), final["msg"]
    assert final["attempts"][0]["cause"].startswith(f"the supervisor of run {run_id} died at "), final["attempts"]
    result = training_result(restarted.stdout)
    assert result["world_size"] == 3 and result["resumed_from_epoch"] >= 1, result
    for node in NODES:
        assert left_on(node) == [], node


def test_a_supervisor_that_fails_mid_run_leaves_nothing_on_any_node(cluster):
    # Its record's write fails once the ranks run on every node (TORCHFLEET_FAULT, in the
    # supervisor's environment through launch_env_set): it ends the launcher and the ranks
    # everywhere, then records the run failed, naming the error.
    run_id = f"tf-svfail-{uuid.uuid4().hex[:8]}"

    def ssh_master_dirs():  # the launch's ssh masters' directories on the head
        return set(docker("exec", NODES[0], "sh", "-c", "ls -d /tmp/tf-ssh-* 2>/dev/null").stdout.split())
    before = ssh_master_dirs()
    rc, output = cluster.launch(*LONG_RUN, "-e", f"run_id={run_id}", "-e",
                                json.dumps({"launch_env_set": {"TORCHFLEET_FAULT": "save-after-launch"}}),
                                timeout=300)
    assert rc != 0, output[-3000:]
    final = head_record(run_id)
    assert final["state"] == "failed", final
    assert final["msg"].startswith(f"the supervisor of run {run_id} failed: OSError: [Errno 5] "
                                   f"TORCHFLEET_FAULT=save-after-launch"), final["msg"]
    for node in NODES:
        assert left_on(node) == [], node
    assert ssh_master_dirs() == before  # closed and removed, as at any end


def test_a_restart_is_refused_while_another_run_holds_the_nodes_and_one_of_two_at_once_starts(cluster):
    # A run stopped mid-way: restartable by hand. While another run is alive on the nodes, a
    # restart is refused naming it; with the nodes free, two restarts at once: one starts (and
    # succeeds, from the checkpoint), the other is refused naming the run.
    run_id = f"tf-rs-{uuid.uuid4().hex[:8]}"
    first = Background(cluster.popen_playbook(
        "launch.yml", "-e", "script=examples/train.py", "-e", "nproc_per_node=1", "-e", f"run_id={run_id}",
        "-e", json.dumps({"script_args": checkpointing_run(run_id)})))
    try:
        wait_until(lambda: checkpointed(run_id), STARTED_WITHIN, "the first checkpoint", first)
        rc, output = cluster.launch("-e", "launch_action=stop")
        assert rc == 0, output[-3000:]
        first.wait(120)
    finally:
        first.kill()
    assert head_record(run_id)["state"] == "stopped"
    other, other_id = start_long_run(cluster)
    try:
        refused = torchfleet(cluster, "restart", run_id, timeout=300)
        said = " ".join((refused.stdout + refused.stderr).split())
        assert refused.returncode != 0, said[-3000:]
        assert f"refusing to restart run {run_id}: another torchfleet run is alive on {NODES[0]}: {other_id}" in said, \
            said[-3000:]
    finally:
        rc, output = cluster.launch("-e", "launch_action=stop")
        assert rc == 0, output[-3000:]
        other.wait(120)
        other.kill()
    both = [subprocess.Popen(torchfleet_argv(cluster, "restart", run_id), cwd=REPO, env=cluster.env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _twice in range(2)]
    outputs = [proc.communicate(timeout=600)[0] for proc in both]
    codes = [proc.returncode for proc in both]
    assert sorted(codes)[0] == 0 and sorted(codes)[1] != 0, outputs
    refusal = " ".join(outputs[codes.index(sorted(codes)[1])].split())
    assert ("another launch or restart is starting on this cluster (run " in refusal
            or f"refusing to restart: run {run_id} is " in refusal), refusal[-3000:]
    final = head_record(run_id)
    assert (final["state"], final["restarts"], final["world_size"]) == ("succeeded", 1, 3), final["msg"]
