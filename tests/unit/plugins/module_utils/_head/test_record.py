"""record.py's reading of a rank's output: lines redrawn with "\\r" (progress bars) and lines of
any length, in pieces, with the memory a reader holds bounded (real files of this machine)."""

import io
import os
import json
import threading
import time

from ansible_collections.torchfleet.cluster.plugins.module_utils._head import record as rr
from ansible_collections.torchfleet.cluster.plugins.module_utils._head.probe import last_lines
from torchfleet import follow


def _pieces(tail, final=False):
    found, _more = tail.pieces(final)
    return [(kind.decode(), text.decode()) for kind, text in found]


def test_a_redrawn_line_comes_as_each_redraw_and_its_end(tmp_path):
    log = tmp_path / "stderr.log"
    tail = rr.Tail(str(log))
    with open(log, "w") as out:
        out.write("epoch 1\n\r  0%|  | 0/3")
        out.flush()
        # What the line reads now, while it is open: drawn on a terminal, never a line of its own.
        assert _pieces(tail) == [("L", "epoch 1"), ("R", "  0%|  | 0/3")]
        assert _pieces(tail) == []  # nothing new: nothing said, nothing re-read
        out.write("\r 33%|# | 1/3\r 67%|##| 2/3")
        out.flush()
        assert _pieces(tail) == [("P", "  0%|  | 0/3"), ("P", " 33%|# | 1/3"), ("R", " 67%|##| 2/3")]
        out.write("\r100%|##| 3/3\nafter\n")
        out.flush()
        assert _pieces(tail) == [("P", " 67%|##| 2/3"), ("D", "100%|##| 3/3"), ("L", "after")]


def test_a_crlf_split_between_two_looks_is_one_lines_end(tmp_path):
    log = tmp_path / "stdout.log"
    tail = rr.Tail(str(log))
    log.write_bytes(b"windows line\r")
    assert _pieces(tail) == [("R", "windows line")]
    with open(log, "ab") as out:
        out.write(b"\nnext\r\n")
    assert _pieces(tail) == [("D", "windows line"), ("L", "next")]


def test_a_line_of_any_length_is_passed_on_in_pieces_with_the_memory_held_bounded(tmp_path):
    log = tmp_path / "stdout.log"
    tail = rr.Tail(str(log))
    written = b"".join(b"%07d" % n for n in range(1_500_000))  # 10.5 MB, no newline, while it is written
    pieces = []
    with open(log, "wb") as out:
        for start in range(0, len(written), 3 << 20):
            out.write(written[start:start + (3 << 20)])
            out.flush()
            while True:
                found, more = tail.pieces()
                pieces += found
                assert len(tail.partial) <= rr.LINE_CAP
                if not more:
                    break
    found, _more = tail.pieces(final=True)
    pieces += found
    kinds = [kind for kind, _text in pieces]
    assert kinds.count(b"C") == len(written) // rr.LINE_CAP and kinds[-1] == b"D"
    assert b"".join(text for kind, text in pieces if kind in (b"C", b"D")) == written
    assert all(len(text) <= rr.DRAWING_CAP for kind, text in pieces if kind == b"R")


def test_a_cut_never_splits_a_character(tmp_path):
    log = tmp_path / "stdout.log"
    text = ("é" * rr.LINE_CAP).encode()  # two bytes each
    log.write_bytes(text + b"\n")
    tail = rr.Tail(str(log))
    pieces = []
    while True:
        found, more = tail.pieces()
        pieces += found
        if not more:
            break
    for kind, piece in pieces:
        if kind in (b"C", b"D"):
            piece.decode()  # raises where a character was cut in two
    assert b"".join(piece for kind, piece in pieces if kind in (b"C", b"D")) == text


def test_a_launchers_tagged_line_keeps_its_tag_on_every_redraw(tmp_path):
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    (run_dir / "launcher.log").write_text("[1,1]<stderr>:[default0]:\r 1/2\r 2/2\n")
    record = {"run_id": "r1", "state": "succeeded", "rc": 0, "nodes": ["n0", "n1"], "slots": [1, 1],
              "mode": "torchrun", "nproc": 1}
    rr.write_state(str(run_dir), record)
    out = io.StringIO()
    rr.follow(str(run_dir), "all", out=out)
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
               "nproc": 1, "supervisor_pid": rr.os.getpid(), "supervisor_start": rr.process_start(rr.os.getpid()),
               "boot_id": rr.boot_id()}
    rr.write_state(str(run_dir), running)
    out = io.StringIO()
    follower = threading.Thread(target=rr.follow, args=(str(run_dir), "0", True), kwargs={"out": out})
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
        follow.deliver(raw, piped.append)
    assert piped == [f"progress {step}/3" for step in range(4)]


def test_the_last_lines_of_a_log_keep_a_bars_last_state_only():
    text = "start\n\r 10%\r 50%\r100%\nend\r\n"
    assert last_lines(text, 20) == ["start", "100%", "end"]
    assert last_lines("a\nb\nc", 2) == ["b", "c"]


def _record(run_dir, run_id, started_at):
    run_dir.mkdir(parents=True)
    rr.write_state(str(run_dir), {"run_id": run_id, "state": "succeeded", "started_at": started_at})


def test_a_run_with_a_log_dir_of_its_own_is_found_through_the_index(tmp_path):
    runs, index = tmp_path / "runs", tmp_path / "index"
    _record(runs / "tf-a", "tf-a", 1.0)
    _record(tmp_path / "shared" / "tf-b", "tf-b", 2.0)
    rr.index_run(str(index), "tf-a", str(runs / "tf-a"))
    rr.index_run(str(index), "tf-b", str(tmp_path / "shared" / "tf-b"))
    rr.index_run(str(index), "tf-gone", str(tmp_path / "removed" / "tf-gone"))  # its directory removed by hand
    assert [r["run_id"] for r in rr.list_runs(str(runs), index=str(index))] == ["tf-b", "tf-a"]
    assert [r["run_id"] for r in rr.list_runs(str(runs))] == ["tf-a"]  # without the index: log_dir alone
    assert rr.run_dir_of(str(runs), "tf-b", str(index)) == str(tmp_path / "shared" / "tf-b")
    assert rr.run_dir_of(str(runs), "tf-a", str(index)) == str(runs / "tf-a")
    assert rr.run_dir_of(str(runs), "tf-gone", str(index)) == str(runs / "tf-gone")
    assert rr.list_runs(str(runs), "tf-b", str(index))[0]["run_id"] == "tf-b"
    # Indexed again (a restart's directory): the link is replaced, never doubled.
    rr.index_run(str(index), "tf-b", str(tmp_path / "shared" / "tf-b"))
    assert sorted(os.listdir(index)) == ["tf-a", "tf-b", "tf-gone"]


def test_the_index_read_is_that_of_the_account_whose_runs_they_are(tmp_path):
    import getpass

    me = getpass.getuser()
    assert rr.runs_index() == os.path.expanduser("~/.local/state/torchfleet/runs")
    assert rr.runs_index("torchfleet") == os.path.expanduser("~torchfleet/.local/state/torchfleet/runs")
    assert rr.owner_of("~torchfleet/torchfleet/runs/tf-1") == "torchfleet"
    assert rr.owner_of("~/torchfleet/runs") == ""
    # A path: the owner of its nearest directory that exists (root reading another account's runs).
    assert rr.owner_of(str(tmp_path / "runs" / "tf-1")) == me
