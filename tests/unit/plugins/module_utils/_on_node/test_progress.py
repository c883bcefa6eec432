"""progress.py: which rank wrote, when it is hung, who stopped first; and the scan the nodes run,
over real files."""

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import progress as pg


def _progress(timeout=None, nodes=("n0", "n1", "n2"), nproc=2):
    return pg.Progress(list(nodes), nproc, [nproc] * len(nodes), timeout)


def test_a_file_names_its_rank_and_node_in_each_mode():
    progress = _progress()
    assert progress.rank_of("/r/workers.1/node2/tf-x_ab/attempt_0/1/stdout.log") == (5, "n2")
    assert progress.rank_of("/r/workers/node0/tf-x_ab/attempt_0/0/stderr.log") == (0, "n0")
    assert progress.rank_of("/r/ranks/1/rank.3/stdout") == (3, "n1")  # rank mode: by the slots
    assert progress.rank_of("/r/launcher.log") is None


def test_the_patterns_are_the_attempts_own_files_on_the_node():
    assert pg.patterns("torchrun", "/r/workers.2", "/r/ranks", 1) == ["/r/workers.2/node1/*/attempt_*/*/std*.log"]
    assert pg.patterns("rank", None, "/r/ranks", 1) == ["/r/ranks/*/rank.*/std*"]
    assert pg.patterns("torchrun", "/r/[odd]", None, 0) == ["/r/[[]odd]/node0/*/attempt_*/*/std*.log"]
    assert pg.patterns("torchrun", None, None, 0) == []


def test_no_progress_for_the_timeout_is_a_hang_naming_the_rank_at_the_lowest_step():
    progress = _progress(timeout=60)
    assert progress.hung(1000.0) is None  # nothing before the first progress: the start is start_timeout's
    for rank in range(6):
        node = rank // 2
        progress.saw(f"/w/node{node}/x/attempt_0/{rank % 2}/stdout.log", 19 if rank == 4 else 20, 100.0 + rank)
    assert progress.hung(160.0) is None
    hung = progress.hung(166.0)
    assert hung["since"] == 105.0 and hung["allowed"] == 60.0 and hung["stopped_first"] == [4]
    assert progress.named([4], lambda t: f"T{t:.0f}") == "rank 4 on n2 (step 19, last progress at T104)"


def test_without_marks_the_ranks_that_stopped_first_are_the_oldest():
    progress = _progress(timeout=30)
    progress.saw("/w/node0/x/attempt_0/0/stdout.log", None, 10.0)
    progress.saw("/w/node0/x/attempt_0/1/stdout.log", None, 50.0)
    progress.saw("/w/node1/x/attempt_0/0/stdout.log", None, 10.5)
    assert progress.hung(100.0)["stopped_first"] == [0, 2]


def test_a_node_not_alive_stops_the_clock_and_zero_never_judges():
    progress = _progress(timeout=60)
    progress.saw("/w/node0/x/attempt_0/0/stdout.log", None, 100.0)
    progress.not_alive(150.0)  # a node paused until then: its ranks could not write
    assert progress.hung(200.0) is None and progress.hung(210.0) is not None
    never = _progress(timeout=0)
    never.saw("/w/node0/x/attempt_0/0/stdout.log", None, 0.0)
    assert never.hung(10 ** 6) is None and never.allowed() is None


def test_the_default_is_learned_from_the_longest_gap_with_a_floor():
    progress = _progress(timeout=None)
    for at in (0.0, 1.0, 2.0, 302.0, 303.0):  # an evaluation of 300 s between two lines
        progress.saw("/w/node0/x/attempt_0/0/stdout.log", None, at)
    assert progress.allowed() == 900.0  # 3 x 300 s
    assert progress.hung(303.0 + 899) is None and progress.hung(303.0 + 900) is not None
    quick = _progress(timeout=None)
    quick.saw("/w/node0/x/attempt_0/0/stdout.log", None, 0.0)
    quick.saw("/w/node0/x/attempt_0/0/stdout.log", None, 90.0)  # 90 s quiet, then on: far from hung
    assert quick.allowed() == pg.HANG_FLOOR and quick.hung(90.0 + pg.HANG_FLOOR - 1) is None


def _marking(progress, rates, last, first=0):
    """Each rank (one a node) marks every second from `first` to `last`, at its rate."""
    for tick in range(int(first), int(last) + 1):
        for rank, rate in enumerate(rates):
            progress.saw(f"/w/node{rank}/x/attempt_0/0/stdout.log", int(rate * tick), float(tick))


def test_a_rank_stepping_under_half_the_others_median_is_a_straggler_once_judged_over_a_window():
    progress = _progress(nproc=1)
    _marking(progress, [2.0, 0.5, 2.0], pg.STRAGGLER_WINDOW - 1)
    assert "stragglers" not in progress.shown(str)  # not a whole window of marks yet
    _marking(progress, [2.0, 0.5, 2.0], pg.STRAGGLER_WINDOW + 10, first=pg.STRAGGLER_WINDOW)
    shown = progress.shown(str)
    assert shown["stragglers"] == {"1": "rank 1 on n1: 0.50 steps/s over its last 30 s, the others 2.00 (their median)"}
    assert [shown["ranks"][rank]["rate"] for rank in "012"] == [2.0, 0.5, 2.0]


def test_ranks_in_lockstep_slow_ranks_and_counts_that_go_back_name_no_straggler():
    for rates in ([1.0, 1.0, 1.0], [0.2, 0.05, 0.2], [2.0, 1.2, 2.0]):  # lockstep; too few steps; not under half
        progress = _progress(nproc=1)
        _marking(progress, rates, 2 * pg.STRAGGLER_WINDOW)
        assert "stragglers" not in progress.shown(str), rates
    progress = _progress(nproc=1)
    _marking(progress, [2.0, 2.0, 2.0], 2 * pg.STRAGGLER_WINDOW)
    progress.saw("/w/node1/x/attempt_0/0/stdout.log", 0, 2 * pg.STRAGGLER_WINDOW + 1)  # its next epoch from 0
    assert "stragglers" not in progress.shown(str) and "rate" not in progress.shown(str)["ranks"]["1"]


def test_a_rank_that_ended_keeps_the_rate_it_had_and_a_straggler_stays_named():
    progress = _progress(nproc=1)
    _marking(progress, [2.0, 0.5, 2.0], 2 * pg.STRAGGLER_WINDOW)
    assert "1" in progress.shown(str)["stragglers"]
    for tick in range(1, 40):  # ranks 0 and 2 have ended; rank 1 goes on, faster now
        progress.saw("/w/node1/x/attempt_0/0/stdout.log", 30 + 3 * tick, 2 * pg.STRAGGLER_WINDOW + tick)
    shown = progress.shown(str)
    assert shown["ranks"]["0"]["rate"] == 2.0 and set(shown["stragglers"]) == {"1"}


def test_a_rank_judged_after_a_quiet_spell_is_compared_with_no_rank_whose_marks_are_older():
    # Rank 0 evaluates for 90 s while the others wait, then every rank marks its last step. Rank
    # 0's mark is seen first: its window (one step in 30 s) is after the others' newest marks.
    progress = _progress(nproc=1)
    _marking(progress, [2.0, 0.5, 2.0], 2 * pg.STRAGGLER_WINDOW)
    assert set(progress.shown(str)["stragglers"]) == {"1"}
    progress.saw("/w/node0/x/attempt_0/0/stdout.log", 121, 2 * pg.STRAGGLER_WINDOW + 90)
    shown = progress.shown(str)
    assert shown["ranks"]["0"]["rate"] < 0.1 and set(shown["stragglers"]) == {"1"}, shown


def test_the_scan_reports_growth_a_carriage_return_redraw_and_the_last_step_mark(tmp_path):
    rank = tmp_path / "workers" / "node1" / "tf-r" / "attempt_0" / "0"
    rank.mkdir(parents=True)
    out = rank / "stdout.log"
    said, sizes = [], {}
    globs = pg.patterns("torchrun", str(tmp_path / "workers"), None, 1)
    pg.scan(globs, sizes, said.append)
    assert said == []  # no file yet
    out.write_bytes(b"loading\nTORCHFLEET_STEP 1\nTORCHFLEET_STEP 2\n")
    pg.scan(globs, sizes, said.append)
    assert said == [b"P 44 2 " + str(out).encode() + b"\n"]
    pg.scan(globs, sizes, said.append)
    assert len(said) == 1  # nothing grew: nothing said
    with out.open("ab") as handle:
        handle.write(b"\r 40%|####      |")  # a progress bar's redraw, no newline
    pg.scan(globs, sizes, said.append)
    assert said[-1] == b"P %d - %s\n" % (out.stat().st_size, str(out).encode())
    with out.open("ab") as handle:
        handle.write(b"\nnot TORCHFLEET_STEP 9\nTORCHFLEET_STEP_X 8\n")
    pg.scan(globs, sizes, said.append)
    assert said[-1].startswith(b"P %d - " % out.stat().st_size)  # only the mark at a line's start, the whole word
    progress = _progress()
    progress.line(said[0], 5.0)
    assert progress.ranks[2].step == 2 and progress.ranks[2].node == "n1" and progress.latest == 5.0


def test_the_head_scans_its_own_files_in_a_thread(tmp_path):
    rank = tmp_path / "node0" / "tf-r" / "attempt_0" / "1"
    rank.mkdir(parents=True)
    (rank / "stderr.log").write_text("warming up\n")
    progress = _progress()
    local = pg.LocalScan(progress, pg.patterns("torchrun", str(tmp_path), None, 0), every=0.01)
    try:
        import time
        deadline = time.monotonic() + 5
        while 1 not in progress.ranks and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        local.close()
    assert progress.ranks[1].node == "n0"


def test_where_ranks_mark_steps_output_at_a_frozen_step_is_no_progress():
    # Every rank marks its steps up to 20 (rank 2 to 19), then all stall in a collective, while a
    # thread on each rank prints a line every 3 s: hung once the marks are frozen for the timeout.
    progress = _progress(timeout=60)
    for tick in range(20):
        for rank in range(6):
            progress.saw(f"/w/node{rank // 2}/x/attempt_0/{rank % 2}/stdout.log", min(tick + 1, 19 if rank == 2 else 20),
                         float(tick))
    for at in range(21, 300, 3):  # the chatter: output, no new step
        for rank in range(6):
            progress.saw(f"/w/node{rank // 2}/x/attempt_0/{rank % 2}/stdout.log", None, float(at))
    hung = progress.hung(19.0 + 61)
    assert hung is not None and hung["since"] == 19.0 and hung["stopped_first"] == [2], hung
    # Its last progress is its last step, not the logger's latest line.
    assert progress.named([2], lambda t: f"T{t:.0f}") == "rank 2 on n1 (step 19, last progress at T18)"
    # A rank that never marks (a progress bar) is judged by its output, beside ranks that do.
    mixed = _progress(timeout=60)
    mixed.saw("/w/node0/x/attempt_0/0/stdout.log", 5, 0.0)
    for at in range(0, 100, 3):
        mixed.saw("/w/node1/x/attempt_0/0/stdout.log", None, float(at))
    assert mixed.hung(100.0) is None and mixed.hung(99.0 + 61) is not None
