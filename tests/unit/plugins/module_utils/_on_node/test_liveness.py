"""liveness.py: death told from silence, on real processes standing in for a node's beat."""

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import liveness
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.liveness import Liveness, NodeState, judge

# Stands in for ssh: runs the remote command line here (`sh -c`, as sshd would), ignoring the options.
SSH = """#!/bin/sh
for last; do :; done
exec sh -c "$last"
"""


def test_a_node_is_judged_by_how_long_it_has_been_quiet():
    assert judge(None, 100.0, 30, None) == (NodeState.ALIVE, None)  # no session yet: not judged
    assert judge(None, 100.0, 30, None, watched=80.0) == (NodeState.ALIVE, None)  # its session is starting
    assert judge(None, 100.0, 30, None, watched=70.0) == (NodeState.LOST, 70.0)  # its first beat never came
    assert judge(99.0, 100.0, 30, None) == (NodeState.ALIVE, None)
    assert judge(100.0 - liveness.SILENT_AFTER, 100.0, 30, None) == (NodeState.SILENT, 100.0 - liveness.SILENT_AFTER)
    assert judge(71.0, 100.0, 30, None) == (NodeState.SILENT, 71.0)  # 29 s: waited out
    assert judge(70.0, 100.0, 30, None) == (NodeState.LOST, 70.0)
    assert judge(99.9, 100.0, 30, (99.5, "gone")) == (NodeState.DEAD, 99.5)  # proven: no wait


def test_a_verdict_names_its_node_and_why():
    dead = liveness.Verdict(NodeState.DEAD, "2026-11-26T10:00:00+00:00", "it restarted: a new boot")
    assert dead.cause("n2", 30) == "n2 died at 2026-11-26T10:00:00+00:00 (it restarted: a new boot)"
    lost = liveness.Verdict(NodeState.LOST, "2026-11-26T10:00:00+00:00")
    assert lost.cause("n2", 30).startswith("n2 stopped answering at 2026-11-26T10:00:00+00:00 (no beat from it "
                                           "for heartbeat_timeout, 30 s")


def _watch(tmp_path, tolerance, remote_python=sys.executable):
    ssh = tmp_path / "ssh"
    ssh.write_text(SSH)
    ssh.chmod(0o755)
    node = SimpleNamespace(name="n1", address="127.0.0.1")
    return Liveness([node], str(ssh), remote_python, tolerance)


def _until(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_pause_shorter_than_the_tolerance_is_silence_then_alive_again_and_longer_is_lost(tmp_path):
    watch = _watch(tmp_path, tolerance=5)
    try:
        beat = watch.beats["n1"]
        _until(lambda: beat.beat is not None, 30, "a first beat")

        def state():
            return watch.verdicts()["n1"].state
        assert state() is NodeState.ALIVE
        os.killpg(beat.proc.pid, signal.SIGSTOP)  # the node's processes frozen, its session open
        _until(lambda: state() is NodeState.SILENT, 10, "silent")
        assert watch.ending() == {}  # silence alone ends nothing
        os.killpg(beat.proc.pid, signal.SIGCONT)
        _until(lambda: state() is NodeState.ALIVE, 5, "alive again")
        os.killpg(beat.proc.pid, signal.SIGSTOP)
        _until(lambda: state() is NodeState.LOST, 15, "lost past the tolerance")
        assert list(watch.ending()) == ["n1"]
        os.killpg(beat.proc.pid, signal.SIGCONT)
    finally:
        watch.close()


def test_a_beat_that_dies_on_a_node_that_answers_with_the_same_boot_is_not_a_death(tmp_path):
    # Only the beat's own process ended (the OOM killer, say): the node takes a new session at once.
    watch = _watch(tmp_path, tolerance=30)
    try:
        beat = watch.beats["n1"]
        _until(lambda: beat.beat is not None, 30, "a first beat")
        first = beat.proc.pid
        os.killpg(first, signal.SIGKILL)
        _until(lambda: beat.proc.pid != first and not beat.confirming, 15, "a new session")
        assert watch.verdicts()["n1"].state is NodeState.ALIVE
    finally:
        watch.close()


def test_a_node_that_comes_back_from_another_boot_is_dead_at_once(tmp_path):
    # Each session reports the boot id it finds; the second one finds another (a reboot).
    boots = tmp_path / "boots"
    python = tmp_path / "python"
    python.write_text(f"""#!/bin/sh
n=$(cat {boots} 2>/dev/null || echo 0); echo $((n + 1)) > {boots}
echo "boot-$n"
exec sleep 600
""")
    python.chmod(0o755)
    watch = _watch(tmp_path, tolerance=30, remote_python=str(python))
    try:
        beat = watch.beats["n1"]
        _until(lambda: beat.beat is not None, 30, "a first line")
        os.killpg(beat.proc.pid, signal.SIGKILL)
        _until(lambda: watch.verdicts()["n1"].state is NodeState.DEAD, 15, "dead")
        verdict = watch.ending()["n1"]
        assert verdict.why == "it restarted: a new boot" and verdict.since
    finally:
        watch.close()


@pytest.mark.parametrize("port", [1])
def test_the_knock_takes_a_refusal_as_an_answer(port):
    # Port 1 is closed here: the kernel's refusal is the answer, and no program sees the knock.
    assert liveness.node_answers("127.0.0.1", port)


def test_a_supervisor_that_was_paused_reads_the_beats_waiting_before_it_judges(tmp_path):
    # As if the supervisor had been stopped for a minute while the node kept beating into the pipe:
    # its last look and the last beat it read are a minute old; the node is alive, not lost.
    watch = _watch(tmp_path, tolerance=5)
    try:
        beat = watch.beats["n1"]
        _until(lambda: beat.beat is not None, 30, "a first beat")
        watch.verdicts()
        watch.looked = beat.beat = time.monotonic() - 60
        assert watch.verdicts()["n1"].state is NodeState.ALIVE
        # Without a pause of its own, a minute without a beat is a node lost.
        beat.beat = time.monotonic() - 60
        watch.looked = time.monotonic()
        state = judge(beat.beat, time.monotonic(), 5, None)[0]
        assert state is NodeState.LOST
    finally:
        watch.close()


def test_the_knock_goes_to_the_port_the_clusters_ssh_uses(tmp_path):
    config = tmp_path / "config"
    config.write_text("Host n7\n    Port 2222\n")
    ssh = tmp_path / "ssh-with-config"
    ssh.write_text(f"#!/bin/sh\nexec ssh -F {config} \"$@\"\n")
    ssh.chmod(0o755)
    assert liveness.ssh_port(str(ssh), "n7") == 2222
    assert liveness.ssh_port(str(ssh), "n8") == 22


def test_a_nodes_beat_carries_its_ranks_progress_to_the_head(tmp_path):
    from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.progress import Progress, patterns
    ssh = tmp_path / "ssh"
    ssh.write_text(SSH)
    ssh.chmod(0o755)
    rank = tmp_path / "workers" / "node1" / "tf-r" / "attempt_0" / "1"
    rank.mkdir(parents=True)
    progress = Progress(["n0", "n1"], 2, [2, 2], 60)
    watch = Liveness([SimpleNamespace(name="n1", address="127.0.0.1")], str(ssh), sys.executable, 30,
                     progress=progress, globs={"n1": patterns("torchrun", str(tmp_path / "workers"), None, 1)})
    try:
        _until(lambda: watch.beats["n1"].beat is not None, 30, "a first beat")
        (rank / "stdout.log").write_text("TORCHFLEET_STEP 7\n")
        _until(lambda: 3 in progress.ranks, 10, "rank 3's progress")
        assert progress.ranks[3].step == 7 and progress.ranks[3].node == "n1"
        assert watch.verdicts()["n1"].state is NodeState.ALIVE  # its lines are beats too
    finally:
        watch.close()


def test_a_stalled_scan_of_the_ranks_files_never_stops_the_beat(tmp_path):
    # The scan stood in for by one that blocks 30 s, as os.stat does on a stalled NFS: the beat
    # program, as a node runs it, still beats every second.
    program = liveness.BEAT.replace("out = sys.stdout.buffer\n", "def scan(*_args):\n    time.sleep(30)\n"
                                    "out = sys.stdout.buffer\n", 1)
    proc = subprocess.Popen([sys.executable, "-S", "-c", program, str(tmp_path / "*.log")], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip()  # the boot id
        began = time.monotonic()
        beats = [proc.stdout.readline() for _beat in range(3)]
        assert beats == [b".\n"] * 3 and time.monotonic() - began < 10, beats
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
