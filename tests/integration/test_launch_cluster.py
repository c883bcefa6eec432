"""launch.yml on three real containers: a run alive refuses the next, stop, a taken port, a timeout.

Molecule proves the training itself (six ranks, resume, rank mode, a failing rank); these tests
need a run going on in the background while they act.
"""

import json
import time

import pytest

from ready_cluster import NODES, run

pytestmark = pytest.mark.cluster
# A run that goes on until stopped: ranks that print and sleep, with no torch to import (ticker.py
# says why); what these tests prove is the launch's, not training's.
TICKER = "script=tests/integration/ticker.py"
LONG_RUN = json.dumps({"script_args": ["--ticks", "1000"]})


def training_pids(node):
    """Pids of the run's processes (workers and torchrun) of the training account on a node."""
    found = run(["docker", "exec", node, "pgrep", "-u", "torchfleet", "-f", "ticker.py"], timeout=60)
    return found.stdout.split()


def wait_until(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(1)
    raise AssertionError(f"not within {seconds} s: {what}")


@pytest.fixture
def long_run(cluster):
    """A run that goes on for a long time, started in the background as a user would."""
    process = cluster.popen_playbook("launch.yml", "-e", TICKER, "-e", "nproc_per_node=1",
                                     "-e", LONG_RUN)
    wait_until(lambda: all(training_pids(node) for node in NODES), 180, "the run started on every node")
    yield process
    if process.poll() is None:
        cluster.launch("-e", "launch_action=stop")
        process.wait(timeout=120)


def ssh_masters(node):
    """The OpenSSH masters the launch holds open on a node (they retitle themselves '... [mux]'),
    and the directories of their sockets."""
    masters = run(["docker", "exec", node, "pgrep", "-u", "torchfleet", "-f", r"^ssh: /tmp/tf-ssh-.*\[mux\]"],
                  timeout=60).stdout.split()
    dirs = run(["docker", "exec", node, "sh", "-c", "ls -d /tmp/tf-ssh-* 2>/dev/null"], timeout=60).stdout.split()
    return masters, dirs


def test_a_second_launch_is_refused_while_a_run_is_alive_and_stop_ends_it(cluster, long_run):
    # The head's check left a master open to each other node, and mpirun was told to start its
    # daemons through them (ssh uses a master whose socket is there).
    masters, dirs = ssh_masters(NODES[0])
    assert len(masters) == len(NODES) - 1 and len(dirs) == 1, (masters, dirs)
    mpirun = run(["docker", "exec", NODES[0], "pgrep", "-u", "torchfleet", "-af", "^/usr/bin/mpirun"], timeout=60).stdout
    assert f"--mca plm_rsh_args -o ControlPath={dirs[0]}/%C" in mpirun, mpirun

    rc, output = cluster.launch("-e", "script=examples/train.py", "-e", LONG_RUN)
    flat = " ".join(output.split())
    assert rc != 0
    # The head checked every node, and names each one the run is alive on.
    assert "refusing to launch: an earlier torchfleet run is still alive on " in flat
    for node in NODES:
        assert f"on {node}: tf-" in flat, node
    assert "ansible-playbook launch.yml -e launch_action=stop" in flat
    assert '"changed": false' in flat  # refused before anything changed
    assert long_run.poll() is None  # the first run goes on

    rc, output = cluster.launch("-e", "launch_action=stop")
    assert rc == 0, output[-3000:]
    # The head first: its supervisor ends the run on every node, the sweep after finds the rest.
    stopped = " ".join(output.split())
    assert f"Stopped on {NODES[0]}: tf-" in stopped, stopped[-3000:]
    long_run.communicate(timeout=120)  # until the first run ends, its output drained
    assert long_run.returncode != 0
    for node in NODES:
        assert training_pids(node) == [], node
    assert ssh_masters(NODES[0]) == ([], [])  # the launch closed them as it ended


def test_a_taken_port_is_reported_before_launch(cluster):
    holder = run(["docker", "exec", "-d", "-u", "torchfleet", NODES[0], "python3", "-c",
                  # SO_REUSEADDR: the last run's connections may still sit in TIME_WAIT on the port.
                  "import socket, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                  "s.bind(('', 29500)); s.listen(); time.sleep(600)"],
                 timeout=60)
    assert holder.returncode == 0, holder.stderr
    try:
        wait_until(lambda: "29500" in run(["docker", "exec", NODES[0], "ss", "-ltn"], timeout=60).stdout,
                   30, "the port holder listens")
        rc, output = cluster.launch("-e", "script=examples/train.py")
        flat = " ".join(output.split())
        assert rc != 0
        assert f"the rendezvous port 29500 is already in use on the head {NODES[0]} by pid" in flat
        assert "-e master_port=N" in flat
        assert '"changed": false' in flat
    finally:
        run(["docker", "exec", NODES[0], "pkill", "-u", "torchfleet", "-f", "s.bind"], timeout=60)


def test_launch_timeout_stops_the_run_everywhere(cluster):
    rc, output = cluster.launch("-e", TICKER, "-e", "nproc_per_node=1", "-e", "launch_timeout=30", "-e", LONG_RUN)
    flat = " ".join(output.split())
    assert rc != 0
    assert "outlived launch_timeout=30s and was stopped" in flat
    for node in NODES:
        assert training_pids(node) == [], node
