"""probe.py: what a launch asks of each node (files, runs, ports), answered from this machine's
real files and processes, and the probe run alone as the head sends it."""

import base64
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import ssh_to_nodes
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import probe as node_probe


def test_run_id_from_proc_environ_bytes():
    raw = b"PATH=/bin\0TORCHFLEET_RUN_ID=tf-1\0HOME=/root\0"
    assert node_probe.env_value(raw) == "tf-1"
    assert node_probe.env_value(b"PATH=/bin\0XTORCHFLEET_RUN_ID=no\0") is None
    assert node_probe.env_value(b"") is None  # a zombie's environ


# Lines of a real /proc/net/tcp: a listener on 0.0.0.0:29577 (0x7389), one on :2024, and
# established connections to port 22.
PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:7389 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 668753 1 000000008c3dc9a8 100 0 0 10 0
   1: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 84 1 0000000029d78d20 100 0 0 10 0
   2: 010012AC:920E 020012AC:0016 01 00000000:00000000 02:000A5FB7 00000000     0        0 576392 2 00000000d2b25a05 21 4 27 996 -1
"""
PROC_NET_TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF00000100007F:7389 0000000000000000FFFF00000100007F:B2BF 06 00000000:00000000 03:00000865 00000000     0        0 0 3 00000000a3cdebde
"""


def test_listening_inodes():
    assert node_probe.listening_inodes(PROC_NET_TCP, 29577) == {668753}
    assert node_probe.listening_inodes(PROC_NET_TCP, 2024) == {84}
    assert node_probe.listening_inodes(PROC_NET_TCP, 37390) == set()  # 0x920E: a connection, not a bind
    assert node_probe.listening_inodes(PROC_NET_TCP6, 29577) == set()  # TIME_WAIT does not hold it


def test_the_probe_names_missing_and_different_files_and_writes_whole_ones(tmp_path):
    same, changed, binary = tmp_path / "train.py", tmp_path / "data.csv", tmp_path / "weights.bin"
    same.write_text("print('hi')\n")
    changed.write_text("a,b\n")
    binary.write_bytes(bytes(range(256)) * 4096)  # more than one read block, not text
    expected = {str(same): node_probe.file_sha1(str(same)), str(changed): "0" * 40,
                str(binary): node_probe.file_sha1(str(binary)), str(tmp_path / "gone.py"): "0" * 40}
    assert node_probe.file_sha1(str(binary)) == hashlib.sha1(binary.read_bytes()).hexdigest()
    answer = node_probe.probe({"expect": expected})
    assert answer["stale"] == sorted([str(changed), str(tmp_path / "gone.py")])
    assert "written" not in answer  # a check writes nothing

    fresh = tmp_path / "new" / "dir" / "gone.py"
    answer = node_probe.probe({"write": {str(fresh): base64.b64encode(b"x = 1\n").decode()},
                               "expect": {str(fresh): hashlib.sha1(b"x = 1\n").hexdigest()}})
    assert answer == {"runs": answer["runs"], "written": [str(fresh)], "stale": []}
    assert fresh.read_bytes() == b"x = 1\n"
    assert oct(fresh.stat().st_mode & 0o777) == "0o640"
    assert oct(fresh.parent.stat().st_mode & 0o777) == "0o750"
    assert [p.name for p in fresh.parent.iterdir()] == ["gone.py"]  # no partial file left


def test_the_probes_stop_ends_that_run_alone_and_names_what_it_ended():
    # What the head asks of every other node after a failed run: TERM, grace, KILL for that run.
    def start(run_id, *argv):
        env = dict(os.environ, **{node_probe.RUN_ID_VAR: run_id})
        return subprocess.Popen(argv, env=env, start_new_session=True)
    failed = start("tf-unit-failed", "sleep", "60")
    stubborn = start("tf-unit-failed", sys.executable, "-c",
                     "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)")
    other = start("tf-unit-other", "sleep", "60")
    try:
        time.sleep(0.5)  # the stubborn one has set its handler
        answer = node_probe.probe({"stop": {"run_id": "tf-unit-failed", "grace": 1}})
        assert sorted(proc["pid"] for proc in answer["stopped"]) == sorted([failed.pid, stubborn.pid])
        assert answer["survivors"] == []
        assert failed.wait(timeout=10) == -signal.SIGTERM
        assert stubborn.wait(timeout=10) == -signal.SIGKILL  # after the grace
        assert other.poll() is None  # another run is not this stop's business
        assert node_probe.probe({"stop": {"run_id": "tf-unit-failed", "grace": 1}}) == {
            "stopped": [], "survivors": []}
    finally:
        for proc in (failed, stubborn, other):
            proc.kill()
            proc.wait()


def test_the_probe_runs_alone_as_the_head_sends_it(tmp_path):
    # The head runs the file's source with `python -c` on the other nodes: it must need nothing
    # but the standard library, and answer JSON for the JSON request on stdin.
    argv = shlex.split(ssh_to_nodes.probe_command(sys.executable))
    assert argv[:3] == [sys.executable, "-S", "-c"]
    target = tmp_path / "t.py"
    done = subprocess.run(argv, input=json.dumps({"expect": {str(target): "0" * 40}}),
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stale"] == [str(target)]
    alive = subprocess.run(argv, input="{}", capture_output=True, text=True, timeout=60, check=False)
    assert json.loads(alive.stdout) == {}  # the silent-node check: an answer, nothing scanned
    broken = subprocess.run(argv, input="not json", capture_output=True, text=True, timeout=60, check=False)
    assert "error" in json.loads(broken.stdout)


def test_an_open_mpi_daemon_is_known_by_its_runs_log_directory():
    argv = [b"/usr/bin/orted", b"--daemonize", b"-mca", b"ess", b"env", b"-mca", b"orte_output_filename",
            b"/home/torchfleet/torchfleet/runs/tf-20261125-164309-2f2f29/ranks", b"-mca", b"orte_tag_output", b"1"]
    assert node_probe.daemon_run_id(b"\0".join(argv) + b"\0") == "tf-20261125-164309-2f2f29"
    assert node_probe.daemon_run_id(b"/usr/bin/python3\0-c\0orte_output_filename\0/x/tf-1/ranks\0") is None
    assert node_probe.daemon_run_id(b"/usr/bin/orted\0--daemonize\0") is None


def test_a_board_request_without_an_entry_only_reads_the_others():
    # Check mode's launch asks for the others and writes nothing (the entry is None).
    answer = node_probe.probe({"board": {"entry": None, "share": False}})
    assert answer["announced"] is None and isinstance(answer["others"], list)


def test_the_last_lines_of_a_log_keep_a_bars_last_state_only():
    text = "start\n\r 10%\r 50%\r100%\nend\r\n"
    assert node_probe.last_lines(text, 20) == ["start", "100%", "end"]
    assert node_probe.last_lines("a\nb\nc", 2) == ["b", "c"]


def test_what_the_supervisor_starts_besides_the_run_carries_none_of_its_marks(monkeypatch):
    pr = node_probe
    monkeypatch.setenv(pr.RUN_ID_VAR, "tf-1")
    monkeypatch.setenv(pr.SUPERVISOR_VAR, "tf-1")
    monkeypatch.setenv("PATH_KEPT", "yes")
    env = pr.unmarked_env()
    assert pr.RUN_ID_VAR not in env and pr.SUPERVISOR_VAR not in env and env["PATH_KEPT"] == "yes"
