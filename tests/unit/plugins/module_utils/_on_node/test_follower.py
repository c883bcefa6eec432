"""follower.py: a run's output as the follower on the head prints it for the torchfleet command,
as it is written and once the run has ended: launcher.log, the head's worker files, and the other
nodes' through their line servers (ssh stood in for), from real files and processes of this
machine (no cluster)."""

import io
import json
import os
import shlex
import subprocess
import sys
import threading
import time

from ansible_collections.torchfleet.cluster.plugins.module_utils import _on_node
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import follower as fl
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import record as rr
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import tail as tl
from torchfleet import run_stream

from run_helpers import running_record


def test_a_launchers_tagged_line_keeps_its_tag_on_every_redraw(tmp_path):
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    (run_dir / "launcher.log").write_text("[1,1]<stderr>:[default0]:\r 1/2\r 2/2\n")
    record = {"run_id": "r1", "state": "succeeded", "rc": 0, "nodes": ["n0", "n1"], "slots": [1, 1],
              "mode": "torchrun", "nproc": 1}
    rr.write_state(str(run_dir), record)
    out = io.StringIO()
    fl.follow(str(run_dir), "all", out=out)
    assert out.getvalue().splitlines()[:-1] == [
        "P launcher/[rank_1_n1] [rank 1 n1]  1/2", "D launcher/[rank_1_n1] [rank 1 n1]  2/2"]


def test_the_follower_passes_a_workers_bar_live_and_every_redraw_in_order(tmp_path):
    run_dir = tmp_path / "r1"
    log = run_dir / "workers" / "r1_x" / "attempt_0" / "0" / "stderr.log"
    log.parent.mkdir(parents=True)
    plan = {"worker_files": True, "paths": {"workers": str(run_dir / "workers")}, "head": "n0", "nproc": 1,
            "nodes": [{"name": "n0", "address": "n0"}], "python": "python3", "ssh": "ssh"}
    (run_dir / "run.json").write_text(json.dumps(plan))
    running = {"run_id": "r1", "state": "running", "nodes": ["n0"], "slots": [1], "mode": "torchrun",
               "nproc": 1, "supervisor_pid": os.getpid(), "supervisor_start": rr.process_start(os.getpid()),
               "boot_id": rr.boot_id()}
    rr.write_state(str(run_dir), running)
    out = io.StringIO()
    follower = threading.Thread(target=fl.follow, args=(str(run_dir), "0", True), kwargs={"out": out})
    follower.start()
    seen = []
    with open(log, "w") as progress:
        for step in range(4):
            progress.write(f"\rprogress {step}/3")
            progress.flush()
            deadline = time.monotonic() + 5
            while f"progress {step}/3" not in out.getvalue() and time.monotonic() < deadline:
                time.sleep(0.01)
            seen.append(f"R n0/0e progress {step}/3" in out.getvalue().splitlines())
        progress.write("\n")
    rr.write_state(str(run_dir), dict(running, state="succeeded", rc=0))
    follower.join(timeout=30)
    assert seen == [True] * 4  # each state of the bar while it was open
    # In a pipe: each redraw a line, the last one the line's end; nothing glued, nothing lost.
    piped = []
    for raw in out.getvalue().splitlines():
        run_stream.deliver(raw, piped.append)
    assert piped == [f"progress {step}/3" for step in range(4)]


def test_follow_streams_lines_as_written_and_ends_with_the_record(tmp_path):
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    rr.write_state(str(run_dir), running_record())
    log = run_dir / "launcher.log"
    out = io.StringIO()
    follower = threading.Thread(target=fl.follow, args=(str(run_dir), "0", True), kwargs={"out": out})
    follower.start()
    with open(log, "a") as handle:
        handle.write("[1,0]<stdout>:[default0]:first\n[1,1]<stdout>:[default0]:not rank 0\n")
        handle.flush()
        time.sleep(0.3)
        assert out.getvalue() == "L first\n"  # shown while the run goes on
        handle.write("[1,0]<stdout>:[default0]:last, no newline")
    rr.write_state(str(run_dir), running_record(state="failed", rc=3))
    follower.join(timeout=10)
    lines = _as_piped(out)
    assert lines[:2] == ["L first", "L last, no newline"]
    assert json.loads(lines[2][2:])["rc"] == 3 and len(lines) == 3


def test_follow_from_now_skips_what_was_written_and_print_does_not_wait(tmp_path):
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    (run_dir / "launcher.log").write_text("[1,0]<stdout>:[default0]:old\n")
    rr.write_state(str(run_dir), running_record())
    out = io.StringIO()
    record = fl.follow(str(run_dir), "0", until_end=False, out=out)
    assert record["state"] == "running" and out.getvalue().startswith("L old\nE ")
    out = io.StringIO()
    rr.write_state(str(run_dir), running_record(state="succeeded", rc=0))
    fl.follow(str(run_dir), "0", from_start=False, out=out)
    assert out.getvalue().startswith("E ")


def test_follow_without_a_record_says_so(tmp_path):
    out = io.StringIO()
    record = fl.follow(str(tmp_path), wait_start=0.1, out=out)
    assert record["state"] == "unknown" and "no run record" in record["msg"]


def test_the_follower_runs_alone_as_the_controller_sends_it(tmp_path):
    # The torchfleet command sends the follower's files to the head as one `python3 -S -c` program:
    # it must need nothing but the standard library.
    rr.write_state(str(tmp_path), running_record(state="succeeded", rc=0))
    (tmp_path / "launcher.log").write_text("[1,0]<stdout>:[default0]:hello\n")
    head = run_stream.Head("h", "torchfleet", str(tmp_path), ["ssh", "h"])
    argv = shlex.split(run_stream.remote_command(head, {"ansible_user": "torchfleet"}, ["print", str(tmp_path)]))
    assert argv[:3] == ["python3", "-S", "-c"]
    done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"}, check=False)
    lines = done.stdout.splitlines()
    assert lines[0] == "L hello" and json.loads(lines[1][2:])["state"] == "succeeded", done.stderr


def test_follow_reads_a_large_log_in_chunks_and_delivers_every_line_once(tmp_path):
    run_dir = tmp_path / "big"
    run_dir.mkdir()
    rr.write_state(str(run_dir), running_record(state="succeeded", rc=0))
    long_line = "y" * (3 * tl.CHUNK // 2)  # a line longer than a chunk arrives whole
    with open(run_dir / "launcher.log", "w") as handle:
        for number in range(60_000):
            handle.write(f"[1,0]<stdout>:[default0]:line {number:06d} {'x' * 60}\n")
        handle.write(f"[1,0]<stdout>:[default0]:{long_line}\n[1,0]<stdout>:[default0]:the end, no newline")
    out = io.StringIO()
    fl.follow(str(run_dir), "0", out=out)
    lines = _as_piped(out)
    assert lines[:60_000] == [f"L line {number:06d} {'x' * 60}" for number in range(60_000)]
    assert lines[60_000:60_002] == [f"L {long_line}", "L the end, no newline"]
    assert json.loads(lines[-1][2:])["state"] == "succeeded" and len(lines) == 60_003


def _as_piped(out):
    """The follower's output as the torchfleet command shows it in a pipe: "L <line>" for each
    line (a redraw or a piece of a line a line of its own), then the "E <record>" line."""
    shown = []
    for raw in out.getvalue().splitlines():
        if run_stream.deliver(raw, lambda text: shown.append("L " + text)) is not None:
            shown.append(raw)
    return shown


def _worker_run(tmp_path, nodes=("n0",), ssh="ssh"):
    """A run whose ranks write only to torchrun's files (2 workers a node), as the module leaves
    it: run.json, the record, the head package as installed."""
    run_dir = tmp_path / "w1"
    package = tmp_path / "installed" / "_on_node"
    package.mkdir(parents=True)
    for name in _on_node.FILES:
        (package / f"{name}.py").write_text(_on_node.source(name))
    run_dir.mkdir()
    workers = run_dir / "workers"
    plan = {"package": str(package), "worker_files": True, "paths": {"workers": str(workers)}, "head": nodes[0], "nproc": 2,
            "nodes": [{"name": name, "address": name} for name in nodes], "python": sys.executable,
            "ssh": ssh}
    (run_dir / "run.json").write_text(json.dumps(plan))
    rr.write_state(str(run_dir), running_record(nodes=list(nodes), slots=[2] * len(nodes)))
    return run_dir, workers


def _worker_file(workers, local, stream="stdout", attempt=0):
    path = workers / "w1_abc" / f"attempt_{attempt}" / str(local) / f"{stream}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def test_follow_reads_the_workers_own_files_on_the_head(tmp_path):
    run_dir, workers = _worker_run(tmp_path)
    _worker_file(workers, 0).write_text("zero 1\nzero 2\nzero, no newline")
    _worker_file(workers, 1).write_text("one 1\n")
    _worker_file(workers, 1, "stderr").write_text("one's traceback\n")
    # torchrun's own words reach the launcher, tagged by Open MPI.
    (run_dir / "launcher.log").write_text("[1,0]<stderr>:W1123 torchrun says\n")
    rr.write_state(str(run_dir), running_record(state="succeeded", rc=0, nodes=["n0"], slots=[2]))
    out = io.StringIO()
    fl.follow(str(run_dir), "0", out=out)
    assert _as_piped(out)[:-1] == ["L zero 1", "L zero 2", "L zero, no newline"]
    out = io.StringIO()
    fl.follow(str(run_dir), "all", out=out)
    lines = _as_piped(out)[:-1]
    assert sorted(lines) == sorted(["L [n0] W1123 torchrun says", "L [rank 0 n0] zero 1", "L [rank 0 n0] zero 2",
                                    "L [rank 0 n0] zero, no newline", "L [rank 1 n0] one 1",
                                    "L [rank 1 n0] one's traceback"])


def test_worker_lines_are_whole_and_once_while_written_in_pieces(tmp_path):
    run_dir, workers = _worker_run(tmp_path)
    out = io.StringIO()
    follower = threading.Thread(target=fl.follow, args=(str(run_dir), "all", True), kwargs={"out": out})
    follower.start()
    big = "y" * (3 * tl.CHUNK // 2)
    with open(_worker_file(workers, 1), "w") as handle:
        for number in range(2000):
            handle.write(f"line {number:05d} ")  # each line in two writes, a look between them
            handle.flush()
            if number % 500 == 0:
                time.sleep(0.12)
            handle.write("end\n")
        handle.write(big + "\nlast, no newline")
    rr.write_state(str(run_dir), running_record(state="succeeded", rc=0, nodes=["n0"], slots=[2]))
    follower.join(timeout=30)
    lines = _as_piped(out)
    assert lines[:-1] == [f"L [rank 1 n0] line {n:05d} end" for n in range(2000)] + \
        [f"L [rank 1 n0] {big}", "L [rank 1 n0] last, no newline"]


def test_the_other_nodes_files_come_through_their_reader(tmp_path):
    # ssh stood in for by a script that runs the command here: the reader's protocol, its end on
    # the run's end, and a node that cannot be read (a unit test; the cluster tests use ssh).
    fake_ssh = tmp_path / "ssh"
    fake_ssh.write_text('#!/bin/sh\nwhile [ "$1" = -o ]; do shift 2; done\n'
                        '[ "$1" = n2 ] && { echo "ssh: connect to host n2: No route to host" >&2; exit 255; }\n'
                        'shift; exec sh -c "$1"\n')
    fake_ssh.chmod(0o755)
    run_dir, workers = _worker_run(tmp_path, ("n0", "n1", "n2"), ssh=str(fake_ssh))
    _worker_file(workers, 0).write_text("head 0\n")
    out = io.StringIO()
    follower = threading.Thread(target=fl.follow, args=(str(run_dir), "all", True), kwargs={"out": out})
    follower.start()
    time.sleep(0.5)
    # n1 is the same directory here: its lines come twice, once as the head's, once as n1's.
    _worker_file(workers, 1).write_text("one 1\none 2, no newline")
    time.sleep(0.3)
    rr.write_state(str(run_dir), running_record(state="failed", rc=1, nodes=["n0", "n1", "n2"], slots=[2] * 3))
    follower.join(timeout=30)
    lines = _as_piped(out)
    assert json.loads(lines[-1][2:])["state"] == "failed"
    assert sorted(lines[:-1]) == sorted([
        "L [rank 0 n0] head 0", "L [rank 2 n1] head 0",
        "L [rank 1 n0] one 1", "L [rank 1 n0] one 2, no newline",
        "L [rank 3 n1] one 1", "L [rank 3 n1] one 2, no newline",
        "L [n2] torchfleet: its worker logs could not be read from the head: "
        "ssh: connect to host n2: No route to host"])


# An earlier version's record.py, a program by itself that served a node's worker files in whole
# lines ("LOCAL TEXT", no hello) until its stdin closed.
EARLIER_RECORD = (
    "import sys\n"
    "if sys.argv[1:2] == ['serve']:\n"
    "    print('1 from an earlier version', flush=True)\n"
    "    sys.stdin.read()\n")


def test_a_run_of_an_earlier_version_is_served_by_the_record_py_of_its_package(tmp_path):
    fake_ssh = tmp_path / "ssh"
    fake_ssh.write_text('#!/bin/sh\nwhile [ "$1" = -o ]; do shift 2; done\nshift; exec sh -c "$1"\n')
    fake_ssh.chmod(0o755)
    run_dir, _workers = _worker_run(tmp_path, ("n0", "n1"), ssh=str(fake_ssh))
    package = tmp_path / "installed" / "_on_node"
    for path in package.iterdir():
        path.unlink()
    (package / "record.py").write_text(EARLIER_RECORD)
    rr.write_state(str(run_dir), running_record(state="succeeded", rc=0, nodes=["n0", "n1"], slots=[2, 2]))
    out = io.StringIO()
    fl.follow(str(run_dir), "node:n1", out=out)
    assert _as_piped(out)[:-1] == ["L [rank 3 n1] from an earlier version"]


def test_one_rank_one_node_and_the_last_lines(tmp_path):
    fake_ssh = tmp_path / "ssh"
    fake_ssh.write_text('#!/bin/sh\nwhile [ "$1" = -o ]; do shift 2; done\nshift; exec sh -c "$1"\n')
    fake_ssh.chmod(0o755)
    run_dir, workers = _worker_run(tmp_path, ("n0", "n1"), ssh=str(fake_ssh))
    _worker_file(workers, 0).write_text("".join(f"zero {n}\n" for n in range(5)))
    _worker_file(workers, 1).write_text("".join(f"one {n}\n" for n in range(5)))
    rr.write_state(str(run_dir), running_record(state="succeeded", rc=0, nodes=["n0", "n1"], slots=[2, 2]))

    def lines(ranks, **kwargs):
        out = io.StringIO()
        fl.follow(str(run_dir), ranks, out=out, **kwargs)
        return _as_piped(out)[:-1]
    assert lines("rank:1") == [f"L one {n}" for n in range(5)]
    # n1 reads the same directory here, through its reader: rank 3 is its local rank 1.
    assert lines("rank:3") == [f"L one {n}" for n in range(5)]
    assert sorted(lines("node:n1")) == sorted([f"L [rank 2 n1] zero {n}" for n in range(5)]
                                              + [f"L [rank 3 n1] one {n}" for n in range(5)])
    assert lines("rank:0", tail=2) == ["L zero 3", "L zero 4"]
    assert lines("rank:3", tail=1, until_end=False) == ["L one 4"]
    assert lines("rank:9") == [] and lines("node:elsewhere") == []


def test_a_restarted_runs_attempts_are_read_each_with_its_own_nodes(tmp_path):
    # Attempt 0 on n0 and n1, attempt 1 (begun while the follower runs) on n0 alone: each
    # attempt's files are labelled by its own ranks (n0's second worker is rank 1 in both).
    fake_ssh = tmp_path / "ssh"
    fake_ssh.write_text('#!/bin/sh\nwhile [ "$1" = -o ]; do shift 2; done\nshift; exec sh -c "$1"\n')
    fake_ssh.chmod(0o755)
    run_dir, workers = _worker_run(tmp_path, ("n0", "n1"), ssh=str(fake_ssh))
    first = {"attempt": 0, "workers": str(workers), "nodes": ["n0", "n1"]}
    rr.write_state(str(run_dir), running_record(nodes=["n0", "n1"], slots=[2, 2], attempts=[first]))
    _worker_file(workers, 1).write_text("first attempt\n")
    out = io.StringIO()
    follower = threading.Thread(target=fl.follow, args=(str(run_dir), "all", True), kwargs={"out": out})
    follower.start()
    time.sleep(0.5)
    second_dir = tmp_path / "w1" / "workers.1"
    path = second_dir / "w1_def" / "attempt_0" / "1" / "stdout.log"
    path.parent.mkdir(parents=True)
    path.write_text("second attempt\n")
    second = {"attempt": 1, "workers": str(second_dir), "nodes": ["n0"]}
    rr.write_state(str(run_dir), running_record(nodes=["n0"], slots=[2], attempts=[first, second]))
    time.sleep(0.5)
    rr.write_state(str(run_dir), running_record(state="succeeded", rc=0, nodes=["n0"], slots=[2],
                                                attempts=[first, second], restarts=1))
    follower.join(timeout=30)
    lines = _as_piped(out)[:-1]
    # n1 reads the same first directory here: its worker 1 is rank 3.
    assert sorted(lines) == sorted(["L [rank 1 n0] first attempt", "L [rank 3 n1] first attempt",
                                    "L [rank 1 n0] second attempt"]), lines


def _scripted_ssh(tmp_path, body):
    """An ssh that answers as a node's line server would, with `body` (Python) writing to `out`."""
    fake = tmp_path / "ssh"
    fake.write_text(f"#!{sys.executable}\nimport sys\nout = sys.stdout.buffer\n{body}\n")
    fake.chmod(0o755)
    return str(fake)


def test_a_cut_or_foreign_line_from_a_node_is_said_once_and_the_follower_still_ends(tmp_path):
    ssh = _scripted_ssh(tmp_path, "out.write(b'=2\\n-\\n0 o L before\\nnot the server\\n0 o L after\\n0 o L cut mid-')")
    run_dir, workers = _worker_run(tmp_path, ("n0", "n1"), ssh=ssh)
    rr.write_state(str(run_dir), running_record(state="succeeded", rc=0, nodes=["n0", "n1"], slots=[2, 2]))
    out = io.StringIO()
    follower = threading.Thread(target=fl.follow, args=(str(run_dir), "all", True), kwargs={"out": out})
    follower.start()
    follower.join(timeout=60)
    assert not follower.is_alive(), "the follower never ended"
    lines = _as_piped(out)
    assert json.loads(lines[-1][2:])["state"] == "succeeded"
    said = [line for line in lines[:-1] if "[n1]" in line or "n1]" in line]
    note = "L [n1] torchfleet: a line cut short or not of its line server was left out (and any like it): "
    assert said[:2] == ["L [rank 2 n1] before", note + "'not the server\\n'"], said
    assert "L [rank 2 n1] after" in said and not any("cut mid-" in line for line in said), said


def test_a_flood_of_unterminated_output_holds_the_follower_to_its_bound_in_bytes(tmp_path):
    # Four ranks' worth of 100 MiB of pieces of lines that never end, faster than they are shown.
    piece = "x" * (1 << 20)
    ssh = _scripted_ssh(tmp_path, "out.write(b'=2\\n-\\n')\n"
                                  f"for n in range(100):\n    out.write(b'%d o C ' % (n % 2) + b'{piece}' + b'\\n')")
    run_dir, workers = _worker_run(tmp_path, ("n0", "n1"), ssh=ssh)
    rr.write_state(str(run_dir), running_record(state="succeeded", rc=0, nodes=["n0", "n1"], slots=[2, 2]))
    seen, slow = [], threading.Event()

    class Sink:
        def write(self, text):
            seen.append(len(text))
            slow.wait(0.002)  # a terminal slower than the node

        def flush(self):
            pass
    output, batches = fl.RunOutput(str(run_dir), rr.read_state(str(run_dir)), "all", True), []
    for lines in output.finish():
        batches.append(sum(len(text) for _kind, _key, text in lines))
        for _kind, _key, text in lines:
            Sink().write(text)
    assert sum(seen) >= 100 * len(piece)
    # Held on the head at once: what waits in the queue, and the batch being shown.
    assert output.queue.peak <= fl.QUEUE_BYTES + len(piece), output.queue.peak
    assert max(batches) <= fl.QUEUE_BYTES + 2 * len(piece), max(batches)


def test_a_spare_that_came_in_is_followed_as_every_other_node(tmp_path):
    # run.json's nodes are the first attempt's (n0, n1); the request's hold the spare n2, which a
    # second attempt took in n1's place.
    fake_ssh = tmp_path / "ssh"
    fake_ssh.write_text('#!/bin/sh\nwhile [ "$1" = -o ]; do shift 2; done\nshift; exec sh -c "$1"\n')
    fake_ssh.chmod(0o755)
    run_dir, workers = _worker_run(tmp_path, ("n0", "n1"), ssh=str(fake_ssh))
    plan = json.loads((run_dir / "run.json").read_text())
    plan["request"] = {"head": "n0", "python": sys.executable, "nodes": [{"name": name, "address": name} for name in ("n0", "n1", "n2")]}
    (run_dir / "run.json").write_text(json.dumps(plan))
    second = tmp_path / "w1" / "workers.1"
    path = second / "w1_def" / "attempt_0" / "0" / "stdout.log"
    path.parent.mkdir(parents=True)
    path.write_text("from the spare's files\n")
    attempts = [{"attempt": 0, "workers": str(workers), "nodes": ["n0", "n1"]},
                {"attempt": 1, "workers": str(second), "nodes": ["n0", "n2"]}]
    rr.write_state(str(run_dir), running_record(state="succeeded", rc=0, nodes=["n0", "n2"], slots=[2, 2],
                                                attempts=attempts, restarts=1))
    out = io.StringIO()
    fl.follow(str(run_dir), "node:n2", out=out)
    assert _as_piped(out)[:-1] == ["L [rank 2 n2] from the spare's files"]


def test_a_node_quiet_before_the_end_still_gives_its_last_line(tmp_path, monkeypatch):
    # Its reader said nothing for longer than REMOTE_QUIET before the run ended; its last line (a
    # progress bar's final state) comes once its stdin closes, and is shown, not cut off.
    monkeypatch.setattr(fl, "REMOTE_QUIET", 1)
    ssh = _scripted_ssh(tmp_path, "import time\nout.write(b'=2\\n-\\n0 o L early\\n'); out.flush()\n"
                                  "sys.stdin.read()\ntime.sleep(0.3)\nout.write(b'0 o L the last state\\n')")
    run_dir, _workers = _worker_run(tmp_path, ("n0", "n1"), ssh=ssh)
    rr.write_state(str(run_dir), running_record(state="succeeded", rc=0, nodes=["n0", "n1"], slots=[2, 2]))
    output = fl.RunOutput(str(run_dir), rr.read_state(str(run_dir)), "all", True)
    time.sleep(1.5)  # quiet past REMOTE_QUIET before the end
    texts = [text for lines in output.finish() for _kind, _key, text in lines]
    assert any("the last state" in text for text in texts), texts
