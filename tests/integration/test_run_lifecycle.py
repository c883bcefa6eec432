"""Runs that belong to the cluster, on three real containers through the `torchfleet` command:
detach and reattach, live output, a controller killed outright, Ctrl-C, a failing rank's exit
code through `wait`, and a supervisor that dies (the run reads as lost, stop still ends it).

The cluster is the session's shared one (three nodes, set up once); every test leaves no run
alive on any node.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from node_reads import processes
from ready_cluster import NODES, REPO, run

pytestmark = pytest.mark.cluster
HEAD = NODES[0]
RUNS = "/home/torchfleet/torchfleet/runs"
# What of a run can live on a node: its supervisor, the launcher, Open MPI's daemon, torchrun, workers.
RUN_PROCESSES = r"_on_node\.(supervisor|guardian)|train\.py|ticker\.py|torchrun|orted|mpirun"
# Training that ends by itself: 1 worker per node, 5 steps an epoch, 0.4 s asleep after each.
TRAINING = ["--use-syn", "--no-wandb", "--epochs", "4", "--steps-per-epoch", "5", "--sleep", "0.4", "--out-dir", "/tmp"]
# The other tests prove what torchfleet does with a run, whatever it runs: ticker.py's ranks print
# and sleep, with no torch to import (ticker.py says why). One that ends by itself in about 10 s,
# and one that runs until it is stopped.
TICKER = "tests/integration/ticker.py"
SHORT = ["--ticks", "20", "--sleep", "0.5"]
ENDLESS = ["--ticks", "1000", "--sleep", "0.8"]
LIMIT = 300  # seconds: bounds against hangs, never expected to be reached


def torchfleet_argv(cluster, *args):
    command, rest = args[0], list(args[1:])
    return [sys.executable, "-m", "torchfleet", command, "-i", str(cluster.inventory), *rest]


def torchfleet(cluster, *args, timeout=LIMIT):
    return subprocess.run(torchfleet_argv(cluster, *args), cwd=REPO, env=cluster.env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def left_on(node):
    return processes(node, "torchfleet", RUN_PROCESSES)


def runs_json(cluster):
    result = torchfleet(cluster, "runs", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return {item["run_id"]: item for item in json.loads(result.stdout)}


def wait_until(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"not within {seconds} s: {what}")


class Attached:
    """`torchfleet launch` in a session of its own, as a terminal's foreground job, its stdout
    read as it comes (with the time each line arrived)."""

    def __init__(self, cluster, *args):
        self.process = subprocess.Popen(torchfleet_argv(cluster, "launch", *args), cwd=REPO, env=cluster.env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        start_new_session=True)
        self.lines, self.errors = [], []
        self.readers = [threading.Thread(target=self._read, args=(stream, into), daemon=True)
                        for stream, into in ((self.process.stdout, self.lines), (self.process.stderr, self.errors))]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream, into):
        for line in stream:
            into.append(line.rstrip("\n"))

    def run_id(self):
        for line in self.errors:
            if line.startswith("torchfleet: run ") and " started on " in line:
                return line.split()[2]
        return None

    def wait(self, seconds=LIMIT):
        self.process.wait(timeout=seconds)
        for reader in self.readers:
            reader.join(timeout=30)
        return self.process.returncode

    def kill(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=60)


def nothing_alive():
    return not any(left_on(node) for node in NODES)


@pytest.fixture(autouse=True)
def nothing_left(cluster):
    yield
    try:
        # A supervisor exits a moment after it has written the run's last record.
        wait_until(nothing_alive, 10, "nothing of any run left")
    except AssertionError:
        torchfleet(cluster, "stop")
        assert nothing_alive(), {node: left_on(node) for node in NODES}
        raise


def test_detach_returns_while_the_run_runs_and_logs_follow_it_to_its_end(cluster):
    started = time.monotonic()
    detached = torchfleet(cluster, "launch", "examples/train.py", "-e", "nproc_per_node=1", "--detach",
                          "--", *TRAINING)
    returned = time.monotonic() - started
    assert detached.returncode == 0, detached.stderr[-3000:]
    run_id = detached.stdout.split()[1]
    assert detached.stdout.startswith(f"run {run_id} is running on {HEAD}, detached"), detached.stdout
    # Returned once every node's worker ran, and before the run ended.
    assert runs_json(cluster)[run_id]["state"] == "running"
    for node in NODES:
        assert any("train.py" in line for line in left_on(node)), node
    print(f"--detach returned after {returned:.1f} s")

    followed = torchfleet(cluster, "logs", "-f", run_id)
    assert followed.returncode == 0, followed.stderr[-3000:]
    lines = followed.stdout.splitlines()
    assert lines[-2].startswith("TORCHFLEET_RESULT "), lines[-5:]  # rank 0's last line, in full
    assert json.loads(lines[-2].split(" ", 1)[1])["world_size"] == 3
    assert lines[-1].startswith(f"run {run_id}: rc 0, world size 3, "), lines[-1]
    assert ", succeeded, logs in " in lines[-1]
    record = runs_json(cluster)[run_id]
    assert (record["state"], record["rc"], record["world_size"]) == ("succeeded", 0, 3)
    assert record["duration"] > 0 and record["started"] and record["failed_rank"] is None

    # Every rank, each line labelled with its rank and node.
    every = torchfleet(cluster, "logs", run_id, "--all-ranks")
    assert every.returncode == 0 and every.stdout.startswith(f"# {run_id} (succeeded)")
    for rank, node in enumerate(NODES):
        assert f"[rank {rank} {node}] TORCHFLEET_RANK rank={rank} " in every.stdout, every.stdout[-3000:]


def test_an_attached_launch_streams_and_its_run_outlives_the_controller(cluster):
    launch = Attached(cluster, TICKER, "-e", "nproc_per_node=1", "--", "--ticks", "30", "--sleep", "0.8")
    try:
        # A tick's line while the run is still going: streamed, not printed at the end.
        wait_until(lambda: any(line.startswith("tick 1/30") for line in launch.lines), LIMIT,
                   "rank 0's first tick on the launcher's stdout")
        run_id = launch.run_id()
        assert run_id, launch.errors
        assert not any(line.startswith("tick 30/30") for line in launch.lines)
        # The controller dies outright: torchfleet, ansible-runner, ssh, all of its process group.
        os.killpg(launch.process.pid, signal.SIGKILL)
        launch.wait(60)
    finally:
        launch.kill()
    assert runs_json(cluster)[run_id]["state"] == "running"
    waited = torchfleet(cluster, "wait", run_id)
    assert waited.returncode == 0, waited.stderr[-3000:]
    assert waited.stdout.startswith(f"run {run_id}: rc 0, ") and ", succeeded, " in waited.stdout, waited.stdout
    assert runs_json(cluster)[run_id]["state"] == "succeeded"


def test_wait_exits_with_the_failing_ranks_own_code_and_names_it(cluster):
    detached = torchfleet(cluster, "launch", TICKER, "-e", "nproc_per_node=1", "--detach",
                          "--", *SHORT, "--fail-on-rank", "2")
    assert detached.returncode == 0, detached.stderr[-3000:]
    run_id = detached.stdout.split()[1]
    waited = torchfleet(cluster, "wait", run_id)
    assert waited.returncode == 3, waited.stdout + waited.stderr
    said = " ".join(waited.stderr.split())
    assert f"rank 2 on {NODES[2]} exited with code 3 first" in said, said
    # The failing rank's own log, read on its node, under its resolved path.
    assert f"the last lines of {RUNS}/{run_id}/workers/" in said and "*" not in said.split("the last lines of")[1].split(":")[0]
    assert "TICKER_FAIL rank=2" in said
    record = runs_json(cluster)[run_id]
    assert (record["state"], record["failed_rank"], record["failed_host"]) == ("failed", 2, NODES[2])
    # An attached launch of the same exits with the same code.
    attached = torchfleet(cluster, "launch", TICKER, "-e", "nproc_per_node=1", "--",
                          *SHORT, "--fail-on-rank", "2")
    assert attached.returncode == 3, attached.stderr[-3000:]


def test_ctrl_c_of_an_attached_launch_stops_the_run_everywhere(cluster):
    launch = Attached(cluster, TICKER, "-e", "nproc_per_node=1", "--", *ENDLESS)
    try:
        wait_until(lambda: any(line.startswith("tick 1/") for line in launch.lines), LIMIT, "the first tick")
        run_id = launch.run_id()
        # A terminal's ^C: SIGINT to the foreground process group.
        os.killpg(launch.process.pid, signal.SIGINT)
        rc = launch.wait(LIMIT)
    finally:
        launch.kill()
    assert rc == 130, launch.errors
    assert f"torchfleet: run {run_id} stopped" in launch.errors, launch.errors
    for node in NODES:
        assert left_on(node) == [], node
    assert runs_json(cluster)[run_id]["state"] == "stopped"


def test_a_supervisor_killed_mid_run_takes_its_run_down_everywhere_recorded_lost(cluster):
    # Issue 26, point 5, the way chosen: the run dies with its supervisor. Its guardian (a small
    # process that outlives it) ends the run on every node and records it lost.
    detached = torchfleet(cluster, "launch", TICKER, "-e", "nproc_per_node=1", "--detach",
                          "--", *ENDLESS)
    assert detached.returncode == 0, detached.stderr[-3000:]
    run_id = detached.stdout.split()[1]
    killed = run(["docker", "exec", HEAD, "pkill", "-KILL", "-u", "torchfleet", "-f",
                  f"_on_node.supervisor {RUNS}/{run_id}"], timeout=60)
    assert killed.returncode == 0, killed.stderr
    at = time.monotonic()
    assert runs_json(cluster)[run_id]["state"] == "lost"
    wait_until(nothing_alive, 60, "nothing of the run left on any node")
    print(f"supervisor SIGKILLed: nothing of the run left {time.monotonic() - at:.1f} s later")
    record = runs_json(cluster)[run_id]
    assert record["state"] == "lost" and record["ended"], record
    assert record["msg"].startswith(f"the supervisor of run {run_id} died at "), record["msg"]
    assert "its guardian ended the run" in record["msg"] and "on the other nodes" in record["msg"], record["msg"]
    waited = torchfleet(cluster, "wait", run_id)
    assert waited.returncode == 1 and ", lost, " in waited.stdout, waited.stdout + waited.stderr
    stopped = torchfleet(cluster, "stop", run_id)  # nothing left to stop; says so, no error
    assert stopped.returncode == 0, stopped.stderr[-3000:]


def test_the_commands_death_leaves_no_ansible_playbook_behind(cluster):
    launch = Attached(cluster, TICKER, "-e", "nproc_per_node=1", "--", *SHORT)
    try:
        # Killed while its playbook starts the run (ansible-playbook runs on a pty of its own).
        def playbook_pids():
            return run(["pgrep", "-P", str(launch.process.pid), "-f", "ansible-playbook"]).stdout.split()
        playbook = wait_until(playbook_pids, 60, "the command's ansible-playbook")[0]
        with open(f"/proc/{playbook}/cmdline") as handle:
            extra = next(arg for arg in handle.read().split("\0") if '"run_id"' in arg)
        run_id = json.loads(extra)["run_id"]["__ansible_unsafe"]  # the command's own -e: data, never templated
        os.killpg(launch.process.pid, signal.SIGKILL)
        launch.wait(60)
    finally:
        launch.kill()
    wait_until(lambda: not os.path.exists(f"/proc/{playbook}"), 30, "its ansible-playbook gone")
    # Whether the run had started when the command died is a matter of timing; if it had, it is
    # the cluster's and ends as it would have.
    if run_id in runs_json(cluster):
        waited = torchfleet(cluster, "wait", run_id)
        assert waited.returncode == 0, waited.stderr[-3000:]


def test_two_launches_at_once_start_one_run_and_the_other_names_it(cluster):
    before = set(runs_json(cluster))
    argv = torchfleet_argv(cluster, "launch", TICKER, "-e", "nproc_per_node=1", "--detach",
                           "--", *ENDLESS)
    both = [subprocess.Popen(argv, cwd=REPO, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _launch in range(2)]
    results = [(proc.wait(timeout=LIMIT), *proc.communicate()) for proc in both]
    try:
        started = [out for rc, out, _err in results if rc == 0]
        refused = [err for rc, _out, err in results if rc != 0]
        assert len(started) == 1 and len(refused) == 1, results
        run_id = started[0].split()[1]
        # Refused by the lock while the first was starting, or by the checks once it was recorded:
        # either way before anything of it started, naming the run that holds the cluster.
        flat = " ".join(refused[0].split())
        assert "refusing to launch" in flat and run_id in flat, flat[-3000:]
        new = set(runs_json(cluster)) - before
        assert new == {run_id}, new  # the refused launch left no run directory, no record
        assert runs_json(cluster)[run_id]["state"] == "running"
        for node in NODES:
            assert any("ticker.py" in line for line in left_on(node)), node
    finally:
        torchfleet(cluster, "stop")


@pytest.mark.parametrize("after, upload", [(0.5, False), (1, False), (2, False), (4, False), (2, True)])
def test_ctrl_c_at_any_moment_of_a_launch_leaves_nothing_and_starts_nothing(cluster, tmp_path, after, upload):
    extra = []
    if upload:  # a large `files` upload in flight (the launch carries 16 MiB at most)
        big = tmp_path / "big.txt"
        big.write_bytes(os.urandom(11 * 2**20).hex().encode()[:15 * 2**20])
        extra = ["-e", json.dumps({"files": [str(big)]})]
    runs_before = set(runs_json(cluster))
    launch = Attached(cluster, TICKER, "-e", "nproc_per_node=1", *extra, "--", *ENDLESS)
    try:
        time.sleep(after)
        os.killpg(launch.process.pid, signal.SIGINT)  # a terminal's ^C, to the foreground group
        interrupted = time.monotonic()
        rc = launch.wait(LIMIT)
        exited = time.monotonic() - interrupted
    finally:
        launch.kill()
    assert rc == 130, "\n".join(launch.errors)  # whole: the lines a failure needs are the last ones
    # Said once the launch has a run to stop; a Ctrl-C before (Python still starting) ends it at once.
    said = next((line for line in launch.errors if line.startswith("torchfleet: interrupted: stopping run ")), None)
    run_id = said.split()[4] if said else None
    assert nothing_alive(), {node: left_on(node) for node in NODES}
    # Nor on this machine: no ansible-playbook of the launch left, nor one of its workers (each in
    # a session of its own, out of reach of the kill of the playbook's process group).
    here = run(["pgrep", "-af", run_id]).stdout.splitlines() if run_id else []
    assert not here, here
    # Nothing starts afterwards: a start in flight on the head was ended, or its run stopped.
    time.sleep(10)
    assert nothing_alive(), {node: left_on(node) for node in NODES}
    records = {key: item["state"] for key, item in runs_json(cluster).items() if key not in runs_before}
    assert set(records) <= {run_id} and set(records.values()) <= {"stopped"}, records  # never started, or stopped
    print(f"^C {after} s into the launch{' (upload)' if upload else ''}: exit {exited:.1f} s later, nothing left")


# Six ranks at full speed: 20,000 numbered 80-byte lines each, a 1 MiB line, a last line without
# its newline.
FLOOD = """
import os, sys
rank = int(os.environ["RANK"])
for number in range(20000):
    sys.stdout.write(f"FLOOD {rank:02d} {number:06d} " + "x" * 63 + "\\n")
sys.stdout.write(f"HUGE {rank} " + "y" * 2**20 + "\\n")
sys.stdout.write(f"LAST {rank} without a newline")
"""


def _every_ranks_lines_once_whole_in_order(text):
    by_rank = {}
    for line in text.splitlines():
        if line.startswith("[rank "):
            label, _sep, said = line.partition("] ")
            by_rank.setdefault(int(label.split()[1]), []).append(said)
    assert sorted(by_rank) == list(range(6)), sorted(by_rank)
    for rank, said in by_rank.items():
        expected = [f"FLOOD {rank:02d} {n:06d} " + "x" * 63 for n in range(20000)]
        expected += [f"HUGE {rank} " + "y" * 2**20, f"LAST {rank} without a newline"]
        assert said == expected, (rank, len(said), [s[:90] for s in said if s not in set(expected)][:5])
    return sum(len(said) - 2 for said in by_rank.values())


def test_every_line_of_every_rank_arrives_once_and_whole_at_full_speed(cluster, tmp_path):
    script = tmp_path / "flood.py"
    script.write_text(FLOOD)
    detached = torchfleet(cluster, "launch", str(script), "-e", "nproc_per_node=2", "--detach")
    assert detached.returncode == 0, detached.stderr[-3000:]
    run_id = detached.stdout.split()[1]
    followed = torchfleet(cluster, "logs", "-f", run_id, "--all-ranks")  # live, from the start
    assert followed.returncode == 0, followed.stderr[-3000:]
    assert _every_ranks_lines_once_whole_in_order(followed.stdout) == 120_000
    afterwards = torchfleet(cluster, "logs", run_id, "--all-ranks")
    assert afterwards.returncode == 0, afterwards.stderr[-3000:]
    assert _every_ranks_lines_once_whole_in_order(afterwards.stdout) == 120_000
    # Rank 0's view: its lines alone, bare.
    rank0 = [line for line in torchfleet(cluster, "logs", run_id).stdout.splitlines()
             if line.startswith(("FLOOD", "HUGE", "LAST"))]
    assert rank0[:20000] == [f"FLOOD 00 {n:06d} " + "x" * 63 for n in range(20000)] and len(rank0) == 20002
    # Stored once: no rank's line in the launcher's log.
    launcher = run(["docker", "exec", HEAD, "grep", "-c", "FLOOD", f"{RUNS}/{run_id}/launcher.log"], timeout=60)
    assert launcher.stdout.strip() == "0", launcher.stdout


def test_runs_prune_removes_ended_runs_on_every_node_and_never_a_running_one(cluster):
    ended = torchfleet(cluster, "launch", TICKER, "-e", "nproc_per_node=1", "--detach", "--", "--ticks", "1")
    assert ended.returncode == 0, ended.stderr[-3000:]
    ended_id = ended.stdout.split()[1]
    assert torchfleet(cluster, "wait", ended_id).returncode == 0
    detached = torchfleet(cluster, "launch", TICKER, "-e", "nproc_per_node=1", "--detach",
                          "--", *ENDLESS)
    assert detached.returncode == 0, detached.stderr[-3000:]
    running_id = detached.stdout.split()[1]
    try:
        for node in NODES:  # every node holds both runs' directories
            listing = run(["docker", "exec", node, "ls", RUNS], timeout=60).stdout.split()
            assert {ended_id, running_id} <= set(listing), (node, listing)
        unasked = torchfleet(cluster, "runs", "--prune")
        assert unasked.returncode == 2 and "--keep N" in unasked.stderr, unasked.stderr
        pruned = torchfleet(cluster, "runs", "--prune", "--keep", "0")
        assert pruned.returncode == 0, pruned.stderr[-3000:]
        assert ended_id in pruned.stdout and running_id not in pruned.stdout, pruned.stdout
        for node in NODES:
            listing = run(["docker", "exec", node, "ls", RUNS], timeout=60).stdout.split()
            assert ended_id not in listing and running_id in listing, (node, listing)
        assert runs_json(cluster)[running_id]["state"] == "running"
    finally:
        assert torchfleet(cluster, "stop", running_id).returncode == 0


def test_a_bare_stop_ends_the_one_run_alive_and_never_several(cluster):
    detached = torchfleet(cluster, "launch", TICKER, "-e", "nproc_per_node=1", "--detach",
                          "--", *ENDLESS)
    assert detached.returncode == 0, detached.stderr[-3000:]
    run_id = detached.stdout.split()[1]
    # What a second run left on node1 (a run lost with its supervisor and guardian): alive too.
    stray = run(["docker", "exec", "-d", "-u", "torchfleet", NODES[1], "env", "TORCHFLEET_RUN_ID=tf-stray",
                 "python3", "-c", "import time; time.sleep(300)  # train.py stand-in"], timeout=60)
    assert stray.returncode == 0, stray.stderr
    wait_until(lambda: any("time.sleep(300)" in line for line in left_on(NODES[1])), 30, "the stray process")
    refused = torchfleet(cluster, "stop")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"2 runs are alive: {run_id}, tf-stray" in refused.stderr or \
        f"2 runs are alive: tf-stray, {run_id}" in refused.stderr, refused.stderr
    assert runs_json(cluster)[run_id]["state"] == "running"  # nothing was stopped
    assert torchfleet(cluster, "stop", run_id).returncode == 0
    assert runs_json(cluster)[run_id]["state"] == "stopped"
    # One alive now: a bare stop ends it and says which.
    last = torchfleet(cluster, "stop")
    assert last.returncode == 0 and "stopping run tf-stray, the one alive" in last.stderr, last.stderr
    assert not any("time.sleep(300)" in line for line in left_on(NODES[1]))
    idle = torchfleet(cluster, "stop")
    assert idle.returncode == 0 and "no run is alive on any node" in idle.stderr, idle.stderr


def test_logs_of_one_rank_one_node_and_the_last_lines_of_a_live_run(cluster):
    detached = torchfleet(cluster, "launch", TICKER, "-e", "nproc_per_node=2", "--detach",
                          "--", *ENDLESS)
    assert detached.returncode == 0, detached.stderr[-3000:]
    run_id = detached.stdout.split()[1]
    try:
        wait_until(lambda: "tick 2/" in torchfleet(cluster, "logs", run_id).stdout, LIMIT, "two ticks")
        rank3 = torchfleet(cluster, "logs", run_id, "--rank", "3")
        assert rank3.returncode == 0, rank3.stderr
        assert "TICKER rank=3 local_rank=1 world_size=6" in rank3.stdout, rank3.stdout[-2000:]
        assert "rank=0 " not in rank3.stdout and "[rank" not in rank3.stdout
        node2 = torchfleet(cluster, "logs", run_id, "--node", NODES[2])
        ranks = {line.split()[1] for line in node2.stdout.splitlines() if line.startswith("[rank ")}
        assert ranks == {"4", "5"}, node2.stdout[-2000:]
        last = torchfleet(cluster, "logs", run_id, "--tail", "2")
        shown = [line for line in last.stdout.splitlines() if not line.startswith("# ")]
        assert len(shown) == 2 and all(line.startswith("tick ") for line in shown), last.stdout
    finally:
        assert torchfleet(cluster, "stop", run_id).returncode == 0
