"""Faults on three real containers, with real mpirun and torchrun: things that go wrong mid-way.

- a node stopped while setup.yml runs: named unreachable, the others complete, the next run converges;
- a training worker killed (SIGKILL) mid-run: the launch fails soon, naming the node, and nothing of
  the run is left anywhere;
- ansible-playbook interrupted as a terminal's ^C would: the run goes on under its supervisor
  (Ansible's ^C looks like a lost connection on the head), and the stop action ends it;
- a node cut off from the network mid-run: Open MPI gives up its daemon within
  launch_silent_node_timeout, the launch ends naming the node, and the daemon on the cut-off node
  ends the ranks there by itself; once the node is back, `-e launch_action=stop` finds nothing to end.

A run left over from an earlier launch (refused, then ended by `-e launch_action=stop`) is covered by
test_launch_cluster.py::test_a_second_launch_is_refused_while_a_run_is_alive_and_stop_ends_it.

Restarts after a fault: test_restarts.py; a node that merely pauses: test_node_pauses.py. The
cluster is shared with the session's other test files: after every test the `restored` fixture
(which those files import) puts every node back running, on the network, reachable, with no run
left.
"""

import json
import os
import re
import signal
import subprocess
import threading
import time
import uuid

import pytest

from node_reads import contains, is_file, processes, read_text
from ready_cluster import NAME, NODES, recap, run, training_result
from torchfleet import devcluster
from torchfleet.devcluster import DOMAIN

pytestmark = pytest.mark.cluster
NETWORK = f"tf-{NAME}"
RUNS = "/home/torchfleet/torchfleet/runs"  # the training account's log_dir on every node
BOARD = "/var/lib/torchfleet/board"  # the run board on every node (setup's)
# A run that trains until stopped (1000 epochs of 5 steps, 0.8 s asleep after every step), one worker per node.
LONG_RUN = ["-e", "script=examples/train.py", "-e", "nproc_per_node=1", "-e",
            json.dumps({"script_args": ["--use-syn", "--epochs", "1000", "--steps-per-epoch", "5", "--sleep", "0.8", "--no-wandb",
                                        "--out-dir", "/tmp"]})]
# What of a run can live on a node: the launcher, Open MPI's daemon, torchrun, the workers.
RUN_PROCESSES = r"_on_node\.(supervisor|guardian)|train\.py|torchrun|orted|mpirun"
# A worker, not its torchrun: torchrun starts each one as `python -u SCRIPT ...`.
WORKER = r"bin/python -u .*train\.py"
# In setup.yml's output: the first role that changes the nodes, after facts and checks.
CHANGES_BEGIN = "TASK [torchfleet.cluster.cluster_user :"
# Seconds to a correct end (bounds against hangs, not benchmarks).
STARTED_WITHIN = 240  # from ansible-playbook to training on every node, on a busy machine
KILLED_RUN_ENDS_WITHIN = 120
INTERRUPTED_RUN_ENDS_WITHIN = 60
LAUNCH_TIMEOUT = 90  # a launch's time to training, with room for a busy machine
SILENT_NODE_TIMEOUT = 20  # launch_silent_node_timeout of the cut-off test (the default is 120)
SHORT_TOLERANCE = 12  # launch_heartbeat_timeout of the tests of a silence past it (the default is 30)


def docker(*argv, timeout=120):
    return run(["docker", *argv], timeout=timeout)


def pause_node(node):
    """`docker pause`, tried again where runc gave up freezing the node ("unable to freeze": the
    cgroup freezer's state did not settle while processes were busy, and runc thawed the node
    back): the freeze is these tests' means, not what they prove."""
    for _attempt in range(5):
        paused = docker("pause", node)
        if paused.returncode == 0 or "unable to freeze" not in paused.stderr:
            return paused
        time.sleep(0.5)
    return paused


def left_on(node):
    """Processes of any run of the training account on `node`, as `pid command` lines."""
    return processes(node, "torchfleet", RUN_PROCESSES)


def training_on(node, run_id):
    """Whether the run's worker on `node` has joined the process group (train.py says so once)."""
    return contains(node, f"{RUNS}/{run_id}/workers", "TORCHFLEET_RANK")


def wait_until(condition, seconds, what, launch=None):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        if launch is not None and launch.process.poll() is not None:
            raise AssertionError(f"the playbook ended before {what}:\n{launch.text()[-3000:]}")
        time.sleep(1)
    raise AssertionError(f"not within {seconds} s: {what}")


def reachable(cluster):
    """Ansible reaches every node over SSH (as every playbook will)."""
    result = run(["ansible", "cluster", "-i", str(cluster.inventory), "-m", "ansible.builtin.ping"],
                 env=cluster.env, timeout=120)
    return result.returncode == 0


class Background:
    """A playbook run in the background, in a session of its own as a terminal's job, its output
    collected as it comes so the test can act on it."""

    def __init__(self, process):
        self.process = process
        self.started = time.monotonic()
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line)

    def text(self):
        return "".join(self.lines)

    def wait(self, seconds):
        """(rc, output, seconds since start); a playbook still running after `seconds` fails the test."""
        try:
            self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the playbook still runs after {seconds} s:\n{self.text()[-3000:]}")
        self.reader.join(timeout=60)
        return self.process.returncode, self.text(), time.monotonic() - self.started

    def kill(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=60)


def start_long_run(cluster, *extra):
    """A long run with a run id of our own, so its logs on every node can be watched."""
    run_id = f"tf-fault-{uuid.uuid4().hex[:8]}"
    launch = Background(cluster.popen_playbook("launch.yml", *LONG_RUN, "-e", f"run_id={run_id}", *extra))
    wait_until(lambda: all(training_on(node, run_id) for node in NODES), STARTED_WITHIN,
               "training on every node", launch)
    return launch, run_id


def module_result(output):
    """The launch module's result, from its `FAILED! => {...}` line."""
    for line in output.splitlines():
        if "FAILED! =>" in line and '"argv"' in line:
            return json.loads(line.split("FAILED! =>", 1)[1])
    raise AssertionError(f"no failed launch module result in:\n{output[-3000:]}")


def seconds_until_named(state, since, limit=60):
    """Seconds from `since` until the run's record (`state`, on the head) names a lost node; None
    if not within `limit`."""
    while time.monotonic() - since < limit:
        if json.loads(read_text(NODES[0], state) or "{}").get("lost_nodes"):
            return time.monotonic() - since
        time.sleep(0.3)
    return None


def restore(cluster):
    """Every node running, on the cluster network under its names, with the interface setup cached
    (eth0), reachable, and no run left on any."""
    changed = [done for index in range(len(NODES)) for done in devcluster.restore_node(NAME, index)]
    if changed:
        print(f"restore: {', '.join(changed)}")
        wait_until(lambda: reachable(cluster), 120, "every node reachable again")
    left = {node: left_on(node) for node in NODES}
    if any(left.values()):
        print(f"restore: stopping what is left: {left}")
        rc, output = cluster.launch("-e", "launch_action=stop")
        assert rc == 0, output[-3000:]
        # Open MPI's daemons carry no run id; they go when their mpirun is gone.
        wait_until(lambda: not any(left_on(node) for node in NODES), 60, "no run left on any node")
    # A launch that lost a node before it could withdraw its board entry there leaves the entry
    # counting for board.STARTING_FOR (180 s) once the node is back, and the next test file on
    # this cluster (test_team_cluster, another account's launch) would be refused naming it. No
    # run of the account is left on any node, so each of its entries is dead: it removes them.
    for node in NODES:
        result = docker("exec", "-u", "torchfleet", node, "find", BOARD, "-maxdepth", "1", "-user", "torchfleet",
                        "-name", "*.json", "-print", "-delete")
        assert result.returncode == 0, result.stderr
        if result.stdout.strip():
            print(f"restore: removed the board entries left on {node}: {result.stdout.split()}")


def reconnect(node, index):
    """Back on the cluster network under the names `cluster up` gave it (Docker has no --ip for a
    network created without a subnet; it hands back the lowest free address, the node's own)."""
    result = docker("network", "connect", "--alias", f"node{index}", "--alias", f"node{index}.{NAME}.{DOMAIN}",
                    NETWORK, node)
    assert result.returncode == 0, result.stderr


@pytest.fixture(autouse=True)
def restored(cluster):
    yield
    restore(cluster)


def test_a_node_stopped_during_setup_is_named_and_the_rest_completes(cluster):
    setup = Background(cluster.popen_playbook("setup.yml", "-e", f"ssh_trust_key_file={cluster.key}"))
    try:
        # Mid-way: every node's facts were read over SSH, and the roles that change nodes have begun.
        wait_until(lambda: f"[{NODES[2]}]" in setup.text().partition(CHANGES_BEGIN)[2], 300,
                   f"{NODES[2]} answers in the training account role", setup)
        assert docker("stop", "--time", "1", NODES[2]).returncode == 0
        rc, output, seconds = setup.wait(900)
    finally:
        setup.kill()
        docker("start", NODES[2])
    counts = recap(output)
    assert rc != 0, output[-3000:]
    assert re.search(rf"fatal: \[{NODES[2]}\]: UNREACHABLE!", output), output[-3000:]
    assert counts[NODES[2]]["unreachable"] == 1
    for node in NODES[:2]:
        assert counts[node]["failed"] == 0 and counts[node]["unreachable"] == 0, output[-3000:]
    # The others went on to setup's last task.
    last_task = output.rsplit("\nTASK [", 1)[1].split("PLAY RECAP")[0]
    assert f"[{NODES[0]}]" in last_task, last_task
    lost = output.index(f"fatal: [{NODES[2]}]: UNREACHABLE")
    task = output[output.rfind("TASK [", 0, lost) + 6:].split("]", 1)[0]
    print(f"setup with {NODES[2]} stopped mid-way: rc {rc} after {seconds:.1f} s; it was lost at {task}")

    # Back again (sshd starts with the container): the next run converges with every node.
    wait_until(lambda: reachable(cluster), 120, f"{NODES[2]} reachable again")
    rc, output = cluster.setup()
    assert rc == 0, output[-3000:]
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in recap(output).values())


def test_a_worker_killed_mid_training_fails_the_launch_naming_its_node(cluster):
    launch, run_id = start_long_run(cluster)
    try:
        workers = docker("exec", NODES[2], "pgrep", "-u", "torchfleet", "-f", WORKER).stdout.split()
        assert len(workers) == 1, workers  # one worker per node: rank 2 on node2
        killed = time.monotonic()
        assert docker("exec", NODES[2], "kill", "-KILL", workers[0]).returncode == 0
        rc, output, since_start = launch.wait(KILLED_RUN_ENDS_WITHIN)
        seconds = time.monotonic() - killed
    finally:
        launch.kill()
    assert seconds < KILLED_RUN_ENDS_WITHIN
    assert rc != 0
    result = module_result(output)
    assert result["failed_host"] == NODES[2], result["msg"]
    assert (result["failed_rank"], result["failed_exit_code"]) == (2, 137), result["msg"]
    assert f"rank 2 on {NODES[2]} was killed by SIGKILL (exit code 137) first" in " ".join(output.split())
    for node in NODES:
        assert left_on(node) == [], node
    print(f"worker killed: the launch ended {seconds:.1f} s later, rc {rc}: {result['msg']}")


def test_ctrl_c_of_ansible_playbook_leaves_the_run_to_its_supervisor(cluster):
    # Changed with runs that belong to the cluster (this test used to expect every rank to end).
    # Ansible's Ctrl-C kills its workers and their ssh, so on the head it looks like a lost
    # connection, which must never end a run: the run goes on, and the stop action ends it.
    launch, run_id = start_long_run(cluster)
    try:
        # A terminal's ^C: SIGINT to the foreground process group, ansible-playbook and its workers.
        os.killpg(launch.process.pid, signal.SIGINT)
        rc, output, since_start = launch.wait(INTERRUPTED_RUN_ENDS_WITHIN)
    finally:
        launch.kill()
    assert rc != 0
    time.sleep(5)  # the module on the head has noticed its caller went, and left
    for node in NODES:
        assert any("train.py" in line for line in left_on(node)), node
    record = json.loads(docker("exec", NODES[0], "cat", f"{RUNS}/{run_id}/state.json").stdout)
    assert record["state"] == "running" and record["supervisor_pid"]
    rc, output = cluster.launch("-e", "launch_action=stop", "-e", f"run_id={run_id}")
    assert rc == 0, output[-3000:]
    wait_until(lambda: not any(left_on(node) for node in NODES), INTERRUPTED_RUN_ENDS_WITHIN,
               "every rank on every node ended")
    record = json.loads(docker("exec", NODES[0], "cat", f"{RUNS}/{run_id}/state.json").stdout)
    assert record["state"] == "stopped", record["msg"]
    print(f"^C of ansible-playbook (rc {rc}): the run went on; the stop action ended it: {record['msg']}")


def test_a_node_cut_off_mid_run_is_named_and_its_ranks_end_there(cluster):
    # launch_timeout only bounds the test: the silent node must end the run long before it. Open
    # MPI's keepalive alone (the supervisor's heartbeat off): the test below has the heartbeat.
    launch, run_id = start_long_run(cluster, "-e", f"launch_silent_node_timeout={SILENT_NODE_TIMEOUT}",
                                    "-e", f"launch_timeout={LAUNCH_TIMEOUT * 3}", "-e", "launch_heartbeat_timeout=0")
    try:
        assert docker("network", "disconnect", NETWORK, NODES[2]).returncode == 0
        cut = time.monotonic()
        # Open MPI's keepalive gives the node up after SILENT_NODE_TIMEOUT s; then the other ranks
        # are stopped (TERM, 10 s of grace, KILL) and the head's ssh to the node times out (5 s).
        rc, output, since_start = launch.wait(SILENT_NODE_TIMEOUT + 60)
        ended = time.monotonic() - cut
        flat = " ".join(output.split())
        assert rc != 0
        result = module_result(output)
        print(f"cut off {cut - launch.started:.1f} s into the launch; it ended {ended:.1f} s later: {result['msg']}")
        assert not result.get("timed_out") and result["failed_host"] == NODES[2], result["msg"]
        assert f"Open MPI lost contact with its daemon on {NODES[2]}: that node went down or off the network" in flat
        assert f"could not reach {NODES[2]} to end what is left of the run there" in flat
        assert "UNREACHABLE" not in output  # the module ends the run; Ansible reached only the head
        for node in NODES[:2]:
            assert left_on(node) == [], node
        # Still cut off: its Open MPI daemon, the connection to mpirun lost, ends what it started.
        wait_until(lambda: left_on(NODES[2]) == [], SILENT_NODE_TIMEOUT + 30,
                   f"nothing of the run left on {NODES[2]} while it is cut off")
        print(f"nothing of the run left on {NODES[2]} {time.monotonic() - cut:.1f} s after the cut")

        # Back on the network, the stop the message advises finds nothing left there.
        reconnect(NODES[2], 2)
        rc, output = cluster.launch("-e", "launch_action=stop")
        assert rc == 0, output[-3000:]
        assert f"Nothing of torchfleet was running on {NODES[2]}." in output
    finally:
        launch.kill()
        restore(cluster)
    assert reachable(cluster)


def test_a_node_whose_cluster_interface_changed_is_refused_before_anything_starts(cluster):
    # Off the network and back, a node has its address again on eth1, not the eth0 setup recorded:
    # a NIC renamed after a reboot or a driver update. mpirun told eth0 would wait for ever.
    assert docker("network", "disconnect", NETWORK, NODES[2]).returncode == 0
    reconnect(NODES[2], 2)
    address = docker("exec", NODES[2], "ip", "-4", "-o", "addr", "show", "eth1").stdout.split()[3].split("/")[0]
    rc, output = cluster.launch(*LONG_RUN, timeout=300)
    flat = " ".join(output.split())
    assert rc != 0
    assert (f"refusing to launch: a node's cluster interface is no longer what setup recorded "
            f"({NODES[2]}: setup recorded eth0 with {address}; the node now has no interface eth0, "
            f"and {address} on eth1)") in flat, flat[-3000:]
    assert "ansible-playbook setup.yml -i INVENTORY" in flat
    assert '"interface_changed"' in output
    for node in NODES:
        assert left_on(node) == [], node


def test_a_node_cut_off_with_restarts_allowed_resumes_on_the_nodes_left_and_is_fenced_when_back(cluster):
    # Issue 27: the supervisor names the node lost once it has been silent for heartbeat_timeout
    # (12 s here, against 30 s by default: silence past the tolerance is what this test is
    # about, not the tolerance's figure; long before Open MPI's keepalive), ends the attempt
    # everywhere it can, and starts the same request on node0 and node1 (min_nodes 2) with a new
    # rendezvous port; train.py resumes from its checkpoint. node2, back on the network while the
    # second attempt runs, has its stale ranks ended. (A node lost without restarts: the hung
    # node's test below, which ends the same way.)
    run_id = f"tf-restart-{uuid.uuid4().hex[:8]}"
    checkpoint = f"/tmp/{run_id}"
    launch = Background(cluster.popen_playbook(
        "launch.yml", "-e", "script=examples/train.py", "-e", "nproc_per_node=1", "-e", f"run_id={run_id}",
        "-e", "max_restarts=1", "-e", "min_nodes=2", "-e", f"launch_timeout={LAUNCH_TIMEOUT * 4}",
        "-e", f"launch_heartbeat_timeout={SHORT_TOLERANCE}",
        "-e", json.dumps({"script_args": ["--use-syn", "--epochs", "14", "--steps-per-epoch", "5", "--sleep", "0.4", "--no-wandb",
                                          "--out-dir", checkpoint]})))
    state = f"{RUNS}/{run_id}/state.json"

    def record():
        return json.loads(read_text(NODES[0], state) or "{}")
    try:
        wait_until(lambda: is_file(NODES[0], f"{checkpoint}/checkpoint.pt"),
                   STARTED_WITHIN, "the first checkpoint", launch)
        assert docker("network", "disconnect", NETWORK, NODES[2]).returncode == 0
        cut = time.monotonic()
        named = seconds_until_named(state, cut)
        wait_until(lambda: record().get("restarts") == 1, 120, "the restart", launch)
        restarted = time.monotonic() - cut
        stale = left_on(NODES[2])
        reconnect(NODES[2], 2)
        wait_until(lambda: not left_on(NODES[2]), 60, f"{NODES[2]}'s stale ranks ended")
        rc, output, _since_start = launch.wait(LAUNCH_TIMEOUT * 4)
    finally:
        launch.kill()
    print(f"cut off: named {named} s later, restarted {restarted:.1f} s later; stale on {NODES[2]}: "
          f"{len(stale)} process(es)")
    assert named is not None and named <= SHORT_TOLERANCE + 5, named
    assert rc == 0, output[-3000:]
    final = record()
    assert (final["state"], final["restarts"], final["world_size"]) == ("succeeded", 1, 2), final["msg"]
    first, second = final["attempts"]
    assert f"{NODES[2]} stopped answering at " in first["cause"], first
    assert second["nodes"] == NODES[:2] and second["cause"] == ""
    result = training_result(docker("exec", NODES[0], "cat", f"{RUNS}/{run_id}/launcher.log").stdout
                             + output)
    assert result["world_size"] == 2 and result["resumed_from_epoch"] >= 1, result
    log = docker("exec", NODES[0], "cat", f"{RUNS}/{run_id}/launcher.log").stdout
    assert f"torchfleet: attempt 1 of run {run_id} begins at " in log
    assert stale and f"torchfleet: {NODES[2]} answers again at " in log, (stale, log[-2000:])
    for node in NODES:
        assert left_on(node) == [], node


def test_a_hung_node_is_named_and_the_run_ended(cluster):
    # A node whose processes are frozen (docker pause) past the tolerance (heartbeat_timeout, 12 s
    # here): no beat from it, and its session with the head stays open. Silent for that long, it
    # is lost: named, and the run (no restarts) ended.
    launch, run_id = start_long_run(cluster, "-e", f"launch_timeout={LAUNCH_TIMEOUT * 3}",
                                    "-e", f"launch_heartbeat_timeout={SHORT_TOLERANCE}")
    state = f"{RUNS}/{run_id}/state.json"
    try:
        assert pause_node(NODES[2]).returncode == 0
        named = seconds_until_named(state, time.monotonic())
        rc, output, _since_start = launch.wait(90)
    finally:
        launch.kill()
        restore(cluster)
    print(f"hung: named {named} s later")
    # Not before the tolerance: the last beat came up to 1 s before the pause took hold.
    assert named is not None and SHORT_TOLERANCE - 2 <= named <= SHORT_TOLERANCE + 10, named
    assert rc != 0
    result = module_result(output)
    assert result["failed_host"] == NODES[2] and NODES[2] in result["lost_nodes"], result["msg"]
    assert "crashed or hung" in " ".join(output.split())
    for node in NODES[:2]:
        assert left_on(node) == [], node


def checkpointing_run(run_id):
    """train.py for 6 epochs (about 25 s), a checkpoint after each, where every node has one. A
    node is lost after the first checkpoint: the attempt cannot succeed without that node's ranks,
    and the one after it has the rest to do."""
    return ["--use-syn", "--epochs", "6", "--steps-per-epoch", "5", "--sleep", "0.4", "--no-wandb", "--out-dir", f"/tmp/{run_id}"]


def head_record(run_id):
    return json.loads(read_text(NODES[0], f"{RUNS}/{run_id}/state.json") or "{}")


def checkpointed(run_id):
    return is_file(NODES[0], f"/tmp/{run_id}/checkpoint.pt")
