"""stacks.py: a real rank blocked in C code arms faulthandler through the run's sitecustomize.py
and gives its stack on the signal, and its flight recorder when asked; only the run's own armed
processes are signalled. (The real torch's dump is proven on the cluster, test_hangs.py: torch is
not in the controller's environment, so here a module of torch's name stands in for it.)"""

import json
import os
import subprocess
import sys
import time

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import stacks

BLOCKED = """
import json, sys, threading, types
if "--with-torch" in sys.argv:  # torch's dump function, as ProcessGroupGloo's recorder answers it
    c10d = sys.modules["torch._C._distributed_c10d"] = types.ModuleType("torch._C._distributed_c10d")
    c10d._dump_fr_trace_json = lambda: json.dumps({
        "pg_status": {"0": {"last_enqueued_collective": "20", "last_completed_collective": "19"}},
        "entries": [{"pg_id": 0, "process_group": ["0", "default_pg"], "record_id": 19, "collective_seq_id": 20,
                     "profiling_name": "gloo:all_reduce", "state": "scheduled", "input_sizes": [[1]]}]}).encode()
if "--with-helper" in sys.argv:  # a DataLoader worker as spawn starts it: the rank's environment
    import subprocess
    helper = subprocess.Popen([sys.executable, "-c", "print('helper', flush=True); import time; time.sleep(60)"],
                              stdout=subprocess.PIPE)
    assert helper.stdout.readline().startswith(b"helper")
def stuck_in_my_own_function():
    print("ready", flush=True)  # from inside: a signal right after it finds this frame on the stack
    threading.Event().wait()  # blocked in C, in a lock, as a rank in a collective
stuck_in_my_own_function()
"""


def _rank(run_dir, rank, run_id="r1", restart=None, with_torch=False, with_helper=False):
    # As the renderer starts a rank: the site in the account's home, the stacks in the run's directory.
    site = stacks.site_dir(os.path.join(str(run_dir), "home"))
    os.makedirs(site, exist_ok=True)
    with open(stacks.site_file(site), "w", encoding="utf-8") as handle:
        handle.write(stacks.SITE)
    env = dict(os.environ, PYTHONPATH=site, RANK=str(rank), TORCHFLEET_RUN_ID=run_id,
               TORCHFLEET_STACKS_DIR=os.path.join(str(run_dir), stacks.STACKS_DIR))
    if restart is not None:
        env["TORCHFLEET_RESTART_COUNT"] = str(restart)
    proc = subprocess.Popen([sys.executable, "-c", BLOCKED] + (["--with-torch"] if with_torch else [])
                            + (["--with-helper"] if with_helper else []), env=env, stdout=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout.readline() == b"ready\n"
    return proc


def test_a_rank_blocked_in_c_gives_every_threads_stack_and_its_own_function_on_top(tmp_path):
    ranks = [_rank(tmp_path, 2), _rank(tmp_path, 5, run_id="another-run")]
    try:
        taken = stacks.take("r1", str(tmp_path), 0, wait=30)
        assert list(taken) == [2], taken  # the other run's process is not this run's
        text = taken[2]["stacks"]
        assert "most recent call first" in text and "in stuck_in_my_own_function" in text, text
        assert "in _torchfleet_flight_recorder" in text  # every thread, the recorder's too
        assert (taken[2]["collectives"], taken[2]["entered"]) == ("", {})  # no torch in this process
        top = stacks.top_frames(text)
        assert top and "in wait" in top[0] and any("stuck_in_my_own_function" in frame for frame in top), top
        assert all(proc.poll() is None for proc in ranks)  # the signal dumps, never ends a rank
    finally:
        for proc in ranks:
            proc.kill()
            proc.wait()


def test_a_ranks_flight_recorder_is_dumped_beside_its_stacks_and_summed_up(tmp_path):
    rank = _rank(tmp_path, 3, with_torch=True)
    try:
        taken = stacks.take("r1", str(tmp_path), 0, wait=30)
        assert taken[3]["entered"] == {"0": 20}, taken
        assert taken[3]["collectives"].splitlines() == [
            "torch's flight recorder (_dump_fr_trace_json, 1 entries):",
            "  process group 0 (default_pg): collectives enqueued up to #20, completed up to #19",
            "    newest: #20 gloo:all_reduce, scheduled, sizes [[1]]"], taken[3]["collectives"]
        kept = json.loads((tmp_path / "stacks" / "attempt_0" / f"rank_3.{rank.pid}.collectives.json").read_text())
        assert kept["_dump_fr_trace_json"]["entries"][0]["collective_seq_id"] == 20  # the whole dump, on the node
        assert stacks.take("r1", str(tmp_path), 0, wait=30)[3]["entered"] == {"0": 20}  # asked again, dumped again
        assert rank.poll() is None
    finally:
        rank.kill()
        rank.wait()


def test_a_process_the_rank_starts_never_arms_as_that_rank(tmp_path):
    rank = _rank(tmp_path, 1, with_helper=True)
    try:
        armed = sorted(os.listdir(tmp_path / "stacks" / "attempt_0"))
        assert armed == [f"rank_1.{rank.pid}.fr", f"rank_1.{rank.pid}.txt"], armed
        assert list(stacks.take("r1", str(tmp_path), 0, wait=30)) == [1]  # the rank's file, none of the helper's
    finally:
        os.killpg(rank.pid, 9)
        rank.wait()


def test_the_ranks_outside_the_collective_the_others_entered_are_behind():
    entered = {0: {"0": 31, "1": 4}, 1: {"0": 30}, 2: {"0": 31}, 3: {}}
    assert stacks.behind(entered) == {1: (30, 31)}
    assert stacks.behind({0: {"0": 5}, 1: {"0": 5}}) == {}
    assert stacks.behind({0: {"0": 5}}) == {}  # one rank's word: nothing to compare
    assert stacks.collectives_summary({"_dump_fr_trace_json": "not a dump"}) == ("", {})
    assert stacks.collectives_summary(None) == ("", {})


def test_only_a_process_that_armed_the_handler_is_signalled(tmp_path):
    # A file whose pid is now a process outside the run (the rank gone, its pid reused) is left
    # alone: the signal's default action would end that process.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        where = tmp_path / "stacks" / "attempt_0"
        where.mkdir(parents=True)
        (where / f"rank_0.{other.pid}.txt").write_text("")
        assert stacks.take("r1", str(tmp_path), 0, wait=0.1) == {}
        time.sleep(0.2)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_rank_gets_nccls_flight_recorder_beside_its_stacks_unless_it_set_its_own(tmp_path):
    site = stacks.site_dir(str(tmp_path / "home"))
    os.makedirs(site)
    with open(stacks.site_file(site), "w", encoding="utf-8") as handle:
        handle.write(stacks.SITE)
    show = "import json, os; print(json.dumps({k: v for k, v in os.environ.items() if k.startswith('TORCH_')}))"
    base = {key: value for key, value in os.environ.items() if not key.startswith("TORCH_")}
    env = dict(base, PYTHONPATH=site, RANK="1", TORCHFLEET_STACKS_DIR=str(tmp_path / "r1" / "stacks"),
               TORCHFLEET_RESTART_COUNT="2")
    seen = json.loads(subprocess.run([sys.executable, "-c", show], env=env, capture_output=True, text=True,
                                     check=True).stdout)
    trace = str(tmp_path / "r1" / "stacks" / "attempt_2" / "nccl_trace_rank_")
    assert seen == {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
                    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_FR_DUMP_TEMP_FILE": trace,
                    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": trace}
    env["TORCH_NCCL_TRACE_BUFFER_SIZE"] = "0"  # the user's own choice stays, and its pair unset
    seen = json.loads(subprocess.run([sys.executable, "-c", show], env=env, capture_output=True, text=True,
                                     check=True).stdout)
    assert seen["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "0" and "TORCH_FR_BUFFER_SIZE" not in seen


def test_the_kept_stacks_are_read_by_attempt_and_rank(tmp_path):
    for attempt, rank in ((0, 2), (0, 10), (1, 0)):
        where = tmp_path / "stacks" / f"attempt_{attempt}"
        where.mkdir(parents=True, exist_ok=True)
        (where / f"rank_{rank}.txt").write_text(f"stack of {rank}")
    (tmp_path / "stacks" / "attempt_0" / "rank_3.77.txt").write_text("a rank's own dump, not kept")
    (tmp_path / "stacks" / "attempt_1" / "rank_0.collectives.txt").write_text("torch's flight recorder")
    expected = {"attempt_0": {2: "stack of 2", 10: "stack of 10"},
                "attempt_1": {0: "stack of 0\n\ntorch's flight recorder"}}
    assert stacks.kept_stacks(str(tmp_path)) == expected


def test_the_top_frames_are_the_current_threads():
    text = ('Thread 0x00007f01 (most recent call first):\n  File "/x/loader.py", line 3 in read\n\n'
            'Current thread 0x00007f02 (most recent call first):\n  File "/x/t.py", line 9 in stuck\n'
            '  File "/x/t.py", line 20 in main\n  File "/x/t.py", line 30 in <module>\n  File "/x/t.py", line 31 in x\n')
    assert stacks.top_frames(text) == ['File "/x/t.py", line 9 in stuck', 'File "/x/t.py", line 20 in main',
                                       'File "/x/t.py", line 30 in <module>']


def test_the_flight_recorders_thread_is_never_taken_for_the_ranks_top():
    text = ('Thread 0x00007f03 (most recent call first):\n  File "/h/sitecustomize.py", line 30 in '
            '_torchfleet_flight_recorder\n\nThread 0x00007f01 (most recent call first):\n  File "/x/t.py", line 9 in stuck\n')
    assert stacks.top_frames(text) == ['File "/x/t.py", line 9 in stuck']


def test_a_planted_link_or_fifo_among_the_kept_stacks_is_never_read(tmp_path):
    # The run's directory is the training account's: a rank may plant a link to a file only root
    # reads, or a fifo that would block the reader for ever.
    secret = tmp_path / "secret"
    secret.write_text("root's own")
    where = tmp_path / "run" / "stacks" / "attempt_0"
    where.mkdir(parents=True)
    (where / "rank_0.txt").write_text("stack of 0")
    (where / "rank_0.collectives.txt").symlink_to(secret)
    (where / "rank_1.txt").symlink_to(secret)
    os.mkfifo(where / "rank_2.txt")
    (where / "rank_3.txt").write_text("stack of 3")
    os.mkfifo(where / "rank_3.collectives.txt")
    assert stacks.kept_stacks(str(tmp_path / "run")) == {"attempt_0": {0: "stack of 0", 3: "stack of 3"}}
