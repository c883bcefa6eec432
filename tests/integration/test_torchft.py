"""fault_tolerance torchft on three real containers: one replica group a node under the run's
supervisor, torchft's Lighthouse on the head, examples/train_ft.py (torchft's Manager, gloo).

A node killed mid-run (`docker kill`) and started again 25 s later: the run succeeds, the
processes on the other two nodes are the same from before the kill to after the node's return,
its group trains again at the others' step (healed from a live peer, not from step 0), and every
group ends with the same parameters. The survivors' longest step gap around the kill is printed,
not asserted (it is the Lighthouse's heartbeat timeout, torchft_heartbeat_ms: docs/performance.md).

The cluster and the helpers are test_faults.py's; its `restored` fixture puts every node back.
"""

import json
import re
import time
import uuid

from node_reads import processes, read_text
from ready_cluster import NODES
from test_faults import LAUNCH_TIMEOUT, RUNS, STARTED_WITHIN, Background, docker, head_record, wait_until
from test_faults import restored  # noqa: F401 pylint: disable=unused-import

STEPS = 900  # about 65 s of training on three 1-worker groups here, 0.05 s asleep a step
AWAY = 25  # seconds the killed node stays down
# The group's own processes on a node: its torchrun and its worker (not the head's ssh to it).
GROUP = r"^\S*(torchrun|python\S*) .*train_ft\.py"
STEP = re.compile(r"TORCHFLEET_STEP (\d+) .*t=([\d.]+)")


def marks(node, index, run_id):
    """(time, step) of each TORCHFLEET_STEP line of the node's group, every start of it, in order."""
    text = docker("exec", node, "sh", "-c", f"cat {RUNS}/{run_id}/workers/node{index}/*/attempt_*/*/stdout.log").stdout
    return sorted((float(m.group(2)), int(m.group(1))) for m in STEP.finditer(text)), text


def group_pids(node):
    return sorted(line.split()[0] for line in processes(node, "torchfleet", GROUP))


def test_a_killed_node_stops_nobody_and_heals_from_a_live_peer(cluster):
    run_id = f"tf-ft-{uuid.uuid4().hex[:8]}"
    launch = Background(cluster.popen_playbook(
        "launch.yml", "-e", "script=examples/train_ft.py", "-e", "nproc_per_node=1", "-e", f"run_id={run_id}",
        "-e", "fault_tolerance=torchft", "-e", f"launch_timeout={LAUNCH_TIMEOUT * 6}",
        "-e", json.dumps({"script_args": ["--steps", str(STEPS), "--sleep", "0.05"]})))
    try:
        wait_until(lambda: any(step >= 30 for _t, step in marks(NODES[2], 2, run_id)[0]), STARTED_WITHIN,
                   "node2's group at step 30", launch)
        before = {node: group_pids(node) for node in NODES[:2]}
        killed = time.time()
        assert docker("kill", NODES[2]).returncode == 0
        time.sleep(AWAY)
        assert docker("start", NODES[2]).returncode == 0
        back = time.time()
        # Its group starts again once the node answers: the others' processes are still theirs.
        wait_until(lambda: any(t > back for t, _step in marks(NODES[2], 2, run_id)[0]), STARTED_WITHIN,
                   "node2's group training again", launch)
        during = {node: group_pids(node) for node in NODES[:2]}
        rc, output, _seconds = launch.wait(LAUNCH_TIMEOUT * 6)
    finally:
        launch.kill()
    record = head_record(run_id)
    assert rc == 0, output[-3000:]
    assert record["state"] == "succeeded", record.get("msg")
    assert before == during and all(before.values()), (before, during)
    groups = record["groups"]
    assert (groups[NODES[2]]["starts"], groups[NODES[0]]["starts"], groups[NODES[1]]["starts"]) == (2, 1, 1), groups
    # Lost as its ssh dropped, or as its beat proved it dead, whichever the supervisor heard first.
    assert NODES[2] in record["lost_nodes"] and groups[NODES[2]]["losses"], groups
    survivor, _text = marks(NODES[0], 0, run_id)
    healed = next(step for t, step in marks(NODES[2], 2, run_id)[0] if t > back)
    others_then = max(step for t, step in survivor if t <= back + 1)
    # Healed at the others' step, not from 0: nothing is redone by anyone.
    assert healed >= others_then - 5, (healed, others_then)
    results = [json.loads(line) for index, node in enumerate(NODES)
               for line in re.findall(r"TORCHFLEET_RESULT (.*)", marks(node, index, run_id)[1])]
    assert len(results) == 3 and len({result["params_sha256"] for result in results}) == 1, results
    gap = max(b[0] - a[0] for a, b in zip(survivor, survivor[1:]) if b[0] >= killed)
    print(f"torchft, {NODES[2]} killed at step 30+ and started {AWAY} s later: the survivors' longest step gap "
          f"{gap:.2f} s; node2 healed at step {healed} (the others at {others_then}); "
          f"lighthouse log {len(read_text(NODES[0], f'{RUNS}/{run_id}/lighthouse.log'))} bytes")
