"""probe.py: what a launch asks of each node (files, runs, the board), answered from this machine's
real files and processes, and the probe run alone as the head sends it (all its files)."""

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
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import node_files, processes
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import probe as node_probe


def test_the_probe_names_missing_and_different_files_and_writes_whole_ones(tmp_path):
    same, changed, binary = tmp_path / "train.py", tmp_path / "data.csv", tmp_path / "weights.bin"
    same.write_text("print('hi')\n")
    changed.write_text("a,b\n")
    binary.write_bytes(bytes(range(256)) * 4096)  # more than one read block, not text
    expected = {str(same): node_files.file_sha1(str(same)), str(changed): "0" * 40,
                str(binary): node_files.file_sha1(str(binary)), str(tmp_path / "gone.py"): "0" * 40}
    assert node_files.file_sha1(str(binary)) == hashlib.sha1(binary.read_bytes()).hexdigest()
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
        env = dict(os.environ, **{processes.RUN_ID_VAR: run_id})
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


def test_a_board_request_without_an_entry_only_reads_the_others():
    # Check mode's launch asks for the others and writes nothing (the entry is None).
    answer = node_probe.probe({"board": {"entry": None, "share": False}})
    assert answer["announced"] is None and isinstance(answer["others"], list)
