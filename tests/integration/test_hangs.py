"""Runs that hang on three real containers, with real mpirun, torchrun and gloo: a rank that
blocks in a function of its own while the others wait for it in an all_reduce. The supervisor
sees no progress while every node is alive, takes every rank's stack, ends the attempt and
restarts it, or ends the run hung. And a rank stepping four times slower than the others is named
a straggler, while the run goes on and at its end (and a rank drawing a `\r` progress bar is making
progress); a run then quiet for 90 s is not hung.

The cluster is the session's shared one; test_faults' `restored` fixture leaves no run behind.
"""

import re
import time
import uuid

import pytest

from ready_cluster import NODES
from test_faults import left_on
from test_faults import restored  # noqa: F401 pylint: disable=unused-import
from test_run_lifecycle import runs_json, torchfleet

pytestmark = pytest.mark.cluster
STOPPING = "tests/integration/stopping_rank.py"


def test_a_rank_that_blocks_is_found_hung_shown_with_its_stack_and_the_restart_succeeds(cluster):
    # A thread on every rank prints a line every 3 s all along (a logger): once the ranks mark
    # their steps, output at a frozen step is no progress.
    run_id = f"tf-hang-{uuid.uuid4().hex[:8]}"
    launched = torchfleet(cluster, "launch", STOPPING, "-e", "nproc_per_node=1", "-e", f"run_id={run_id}",
                          "--max-restarts", "1", "--hang-timeout", "60", "--detach",
                          "--", "--stop-rank", "2", "--stop-at", "20", "--chatter", "3")
    assert launched.returncode == 0, launched.stderr[-3000:]
    # While it hangs: past half the timeout it is stalled?. (Until rank 2 is: each rank's progress is
    # dated when the head sees it, so the others' may pass half the timeout a second before.)
    deadline, shown = time.monotonic() + 120, ""
    while ", step 19  stalled?" not in shown and time.monotonic() < deadline:
        status = torchfleet(cluster, "status", run_id)
        shown = status.stdout
        time.sleep(2)
    assert f"  rank 2 on {NODES[2]}: " in shown and ", step 19  stalled?" in shown, shown
    assert f"  rank 0 on {NODES[0]}: " in shown and ", step 20" in shown, shown
    waited = torchfleet(cluster, "wait", run_id)
    assert waited.returncode == 0, waited.stdout[-2000:] + waited.stderr[-3000:]
    record = runs_json(cluster)[run_id]
    assert (record["state"], record["restarts"]) == ("succeeded", 1), record["msg"]
    cause = record["attempts"][0]["cause"]
    assert record["attempts"][0]["hung"]["stopped_first"] == [2], record["attempts"][0]
    assert cause.startswith("hung: no progress since "), cause
    assert f"stopped first: rank 2 on {NODES[2]} (step 19, last progress at " in cause, cause
    assert "rank 2's stack: File " in cause and "in stuck_in_a_function_of_its_own" in cause, cause
    # torch's flight recorder (gloo's): rank 2 entered 19 all_reduces, the others wait in the 20th.
    assert "; rank 2 not in collective #20 the others entered (its newest: #19; " in cause, cause
    assert record["attempts"][0]["hung"]["outside_collective"] == [2], record["attempts"][0]
    print(f"the hung attempt's cause: {cause}")
    stacks = torchfleet(cluster, "logs", run_id, "--stacks")
    assert stacks.returncode == 0, stacks.stderr[-2000:]
    assert f"# {run_id} attempt 0, rank 2\n" in stacks.stdout, stacks.stdout[-3000:]
    assert "in stuck_in_a_function_of_its_own" in stacks.stdout and "in all_reduce" in stacks.stdout, stacks.stdout
    assert "torch's flight recorder (_dump_fr_trace_json, " in stacks.stdout, stacks.stdout[-3000:]
    assert "process group 0 (default_pg): collectives enqueued up to #19, completed up to #19" in stacks.stdout
    assert "process group 0 (default_pg): collectives enqueued up to #20, completed up to #19" in stacks.stdout
    print(stacks.stdout[-1500:])
    for node in NODES:
        assert left_on(node) == [], node


def test_a_hang_without_restarts_ends_the_run_hung_with_its_own_exit_code_and_leaves_nothing(cluster):
    run_id = f"tf-hung-{uuid.uuid4().hex[:8]}"
    launched = torchfleet(cluster, "launch", STOPPING, "-e", "nproc_per_node=1", "-e", f"run_id={run_id}",
                          "--hang-timeout", "10", "--", "--stop-rank", "1", "--stop-at", "5")
    said = " ".join(launched.stderr.split())
    assert launched.returncode == 123, launched.stdout[-2000:] + said[-3000:]
    assert f"run {run_id} hung: no rank made progress since " in said and "(hang_timeout 10 s)" in said, said
    assert f"stopped first: rank 1 on {NODES[1]} (step 4, " in said, said
    record = runs_json(cluster)[run_id]
    assert (record["state"], record["hung"]["stopped_first"]) == ("hung", [1]), record
    assert record["hung"]["outside_collective"] == [1], record["hung"]
    for node in NODES:
        assert left_on(node) == [], node


def test_a_straggler_is_named_in_status_and_at_the_end_and_90_s_of_quiet_is_not_a_hang(cluster):
    run_id = f"tf-slow-{uuid.uuid4().hex[:8]}"
    launched = torchfleet(cluster, "launch", STOPPING, "-e", "nproc_per_node=1", "-e", f"run_id={run_id}", "--detach",
                          "--", "--for-seconds", "45", "--slow-rank", "1", "--bar-rank", "2", "--quiet-for", "90")
    assert launched.returncode == 0, launched.stderr[-3000:]
    deadline, shown = time.monotonic() + 120, ""
    while "straggler:" not in shown and time.monotonic() < deadline:
        shown = torchfleet(cluster, "status", run_id).stdout
        time.sleep(2)
    assert f"  straggler: rank 1 on {NODES[1]}: " in shown, shown
    assert "rank 0" not in shown.split("straggler:", 1)[1] and "rank 2" not in shown.split("straggler:", 1)[1], shown
    # Rank 2 draws a \r progress bar, never a line or a mark: that is progress too.
    drawn = re.search(rf"\n  rank 2 on {NODES[2]}: (\d+) s ago\n", shown)
    assert drawn and int(drawn.group(1)) < 30, shown
    print(shown)
    # Then every rank is quiet for 90 s (rank 0 "evaluates", the others wait for it): the default
    # timeout (600 s at least) neither ends it nor calls it stalled.
    deadline, newest = time.monotonic() + 150, 0
    while newest < 70 and time.monotonic() < deadline:
        shown = torchfleet(cluster, "status", run_id).stdout
        found = re.search(r"progress: +newest (\d+) s ago; hung after (\d+) s without", shown)
        newest = int(found.group(1)) if found else 0
        time.sleep(5)
    assert newest >= 70 and "stalled?" not in shown and re.search(r"\nstate: +running\n", shown), shown
    print(shown)
    waited = torchfleet(cluster, "wait", run_id)
    assert waited.returncode == 0, waited.stdout[-2000:] + waited.stderr[-3000:]
    said = " ".join(waited.stderr.split())
    assert f"torchfleet: straggler: rank 1 on {NODES[1]}: " in said and "steps/s over its last 30 s" in said, said
    assert said.count("straggler:") == 1, said
    record = runs_json(cluster)[run_id]
    assert (record["state"], record["restarts"], record.get("hung")) == ("succeeded", 0, None), record
