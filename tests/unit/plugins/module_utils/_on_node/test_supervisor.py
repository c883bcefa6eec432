"""supervisor.py: a supervisor started as the module starts it, from the installed head package,
for a launcher on this machine alone: how each way a run ends is recorded, and what is left running."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from torchfleet import run_stream

from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_start as start
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import processes
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import supervisor, transitions
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.progress import Progress
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.record import (
    PLAN_FILE,
    read_state,
)


# The keys of a finished run's state.json (one node, no scheduler) as the supervisor has always
# written them: readers of old and new runs see the same record.
FINISHED_RUN_KEYS = {
    "run_id", "state", "rc", "duration", "command", "nodes", "slots", "head", "mode", "nproc",
    "world_size", "started", "started_at", "ended", "log_dir", "launcher_log", "scheduler", "job_id",
    "supervisor_pid", "supervisor_start", "boot_id", "launcher_pid", "timed_out", "failed_rank",
    "failed_host", "failed_exit_code", "failed_log", "failed_log_tail", "msg", "warnings",
    "stdout_tail", "rank0_tail", "restarts"}


def test_the_supervisor_runs_from_the_package_installed_once_for_its_version(tmp_path, supervisor_plan):
    run_dir = tmp_path / "tf-unit-supervised"
    run_dir.mkdir(parents=True)
    package = start.install_head_package(str(tmp_path / "home"))
    assert start.install_head_package(str(tmp_path / "home")) == package  # once per version
    installed = Path(package).parent.parent
    assert package.startswith(str(tmp_path / "home" / ".local" / "share" / "torchfleet" / "head"))
    assert [path.name for path in installed.iterdir()] == [Path(package).parent.name]  # nothing half-written left
    paths = {"run": str(run_dir), "launcher": str(run_dir / "launcher.log"), "ranks": "", "workers": ""}
    plan = supervisor_plan(
        run_id=run_dir.name, argv=[sys.executable, "-c", "import os; print(os.getcwd())"], cwd=None,
        command="print the directory", nodes=[{"name": "here", "address": "127.0.0.1", "slots": 1}],
        mode="rank", nproc=1, world_size=1, python=sys.executable, ssh=None,
        check_nodes=False, control_dir=None, launch_timeout=0, stop_grace=1, paths=paths)
    (run_dir / PLAN_FILE).write_text(plan.to_json())
    env = {"PATH": os.environ["PATH"], processes.RUN_ID_VAR: run_dir.name, processes.SUPERVISOR_VAR: run_dir.name}
    proc = supervisor.start(sys.executable, package, str(run_dir), env)
    assert proc.wait(timeout=60) == 0, (run_dir / "supervisor.log").read_text()
    assert proc.args[1:4] == ["-S", "-m", "_on_node.supervisor"]
    record = read_state(str(run_dir))
    assert (record["state"], record["rc"], record["msg"]) == ("succeeded", 0, f"run {run_dir.name} succeeded")
    assert set(record) == FINISHED_RUN_KEYS
    # The launcher starts in the run's directory where the plan names none.
    assert os.path.realpath((run_dir / "launcher.log").read_text().strip()) == os.path.realpath(run_dir)


def _supervised(supervisor_plan, tmp_path, name, argv, start_timeout, wait=True, env=None, launch_timeout=60):
    """A supervisor of its own for a launcher `argv` on this machine alone, started as the module
    starts it; its end's record, or (not `wait`) the supervisor's Popen."""
    run_dir = tmp_path / name
    run_dir.mkdir(parents=True)
    package = start.install_head_package(str(tmp_path / "home"))
    paths = {"run": str(run_dir), "launcher": str(run_dir / "launcher.log"), "ranks": "", "workers": ""}
    plan = supervisor_plan(
        run_id=name, argv=argv, cwd=None, command="a launcher", nodes=[{"name": "here", "address": "127.0.0.1", "slots": 1}],
        mode="rank", nproc=1, world_size=1, python=sys.executable, ssh=None, check_nodes=False,
        control_dir=None, launch_timeout=launch_timeout, stop_grace=1, paths=paths, start_timeout=start_timeout)
    (run_dir / PLAN_FILE).write_text(plan.to_json())
    env = {"PATH": os.environ["PATH"], processes.RUN_ID_VAR: name, processes.SUPERVISOR_VAR: name, **(env or {})}
    proc = supervisor.start(sys.executable, package, str(run_dir), env)
    if not wait:
        return proc
    proc.wait(timeout=90)  # 0 for a run that succeeded, 1 for one that did not
    return read_state(str(run_dir))


def test_a_supervisor_killed_outright_leaves_nothing_running_and_its_run_recorded_lost(tmp_path, supervisor_plan):
    # A launcher with a rank of its own session (as torchrun's workers are): the guardian ends
    # both once the supervisor is SIGKILLed, and records the run lost, saying what it did.
    rank = "import time; time.sleep(600)"
    launcher = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {rank!r}], "
                f"start_new_session=True); time.sleep(600)")
    proc = _supervised(supervisor_plan, tmp_path, "tf-unit-killed", [sys.executable, "-c", launcher], 0, wait=False)
    run_dir = str(tmp_path / "tf-unit-killed")
    deadline = time.monotonic() + 30
    while len(processes.find_run_processes({"tf-unit-killed"})) < 4:  # supervisor, guardian, launcher, rank
        assert time.monotonic() < deadline, processes.find_run_processes({"tf-unit-killed"})
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    killed = time.monotonic()
    while processes.find_run_processes({"tf-unit-killed"}):
        assert time.monotonic() - killed < 30, processes.find_run_processes({"tf-unit-killed"})
        time.sleep(0.1)
    record = read_state(run_dir)
    assert record["state"] == "lost" and record["ended"], record
    assert record["msg"].startswith("the supervisor of run tf-unit-killed died at "), record["msg"]
    assert "its guardian ended the run (2 process(es) on the head)" in record["msg"], record["msg"]


def test_a_supervisor_that_fails_mid_run_ends_the_run_before_it_records_the_failure(tmp_path, supervisor_plan):
    # Its record's write fails once the ranks run (the injected fault): the launcher and its rank,
    # in a session of its own as torchrun's workers are, are ended; the record names the error.
    rank = "import time; time.sleep(600)"
    launcher = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {rank!r}], "
                f"start_new_session=True); time.sleep(600)")
    record = _supervised(supervisor_plan, tmp_path, "tf-unit-fails", [sys.executable, "-c", launcher], 60,
                         env={transitions.FAULT_VAR: transitions.FAULT_SAVE})
    assert (record["state"], record["rc"]) == ("failed", 1), record
    assert record["msg"].startswith("the supervisor of run tf-unit-fails failed: OSError: [Errno 5] "
                                    "TORCHFLEET_FAULT=save-after-launch"), record["msg"]
    assert "its launcher and what the run ran on the head were ended" in record["msg"], record["msg"]
    deadline = time.monotonic() + 10
    while processes.find_run_processes({"tf-unit-fails"}):  # its guardian goes too
        assert time.monotonic() < deadline, processes.find_run_processes({"tf-unit-fails"})
        time.sleep(0.1)
    assert read_state(str(tmp_path / "tf-unit-fails"))["state"] == "failed"


def test_a_supervisor_that_ends_well_takes_its_guardian_with_it(tmp_path, supervisor_plan):
    record = _supervised(supervisor_plan, tmp_path, "tf-unit-guarded", [sys.executable, "-c", "pass"], 0)
    assert record["state"] == "succeeded"
    deadline = time.monotonic() + 10
    while processes.find_run_processes({"tf-unit-guarded"}):
        assert time.monotonic() < deadline, processes.find_run_processes({"tf-unit-guarded"})
        time.sleep(0.1)
    assert read_state(str(tmp_path / "tf-unit-guarded"))["state"] == "succeeded"


def test_a_run_past_launch_timeout_is_timed_out_with_124_whatever_its_launcher_said(tmp_path, supervisor_plan):
    # TERM ends the launcher with 143 (or KILL with 137): the run's code is the time-out's.
    record = _supervised(supervisor_plan, tmp_path, "tf-unit-late", [sys.executable, "-c", "import time; time.sleep(600)"],
                         0, launch_timeout=2)
    assert (record["state"], record["timed_out"], record["rc"]) == ("timed_out", True, 124), record
    assert run_stream.exit_code(record) == 124


def test_a_launcher_that_never_starts_a_rank_is_ended_at_start_timeout_naming_the_node(tmp_path, supervisor_plan):
    # A launcher waiting for ever (as mpirun for a daemon that cannot call back), no rank started.
    began = time.monotonic()
    record = _supervised(supervisor_plan, tmp_path, "tf-unit-never", [sys.executable, "-c", "import time; time.sleep(600)"], 2)
    assert time.monotonic() - began < 60
    assert (record["state"], record["never_started"], record["timed_out"]) == ("failed", ["here"], False)
    assert record["msg"].startswith("run tf-unit-never did not start within start_timeout (2 s): no process "
                                    "of it ran on here")


def test_a_run_whose_ranks_started_outlives_start_timeout(tmp_path, supervisor_plan):
    rank = "import time; time.sleep(4)"
    launcher = f"import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', {rank!r}]).returncode)"
    record = _supervised(supervisor_plan, tmp_path, "tf-unit-started", [sys.executable, "-c", launcher], 1)
    assert (record["state"], record["rc"]) == ("succeeded", 0)
    assert "never_started" not in record


def test_a_launcher_that_ends_while_the_start_watch_looks_past_start_timeout_is_not_judged(
        tmp_path, supervisor_plan, monkeypatch):
    # Issue 62, point 3: the launcher exits 0 during the look that runs past start_timeout. What
    # the look found missing is no verdict: the run ended, its own outcome stands.
    run_dir = tmp_path / "tf-unit-ends-in-look"
    run_dir.mkdir()
    paths = {"run": str(run_dir), "launcher": str(run_dir / "launcher.log"), "ranks": "", "workers": ""}
    plan = supervisor_plan(
        run_id=run_dir.name, argv=[sys.executable, "-c", "pass"], cwd=None, command="a launcher",
        nodes=[{"name": "here", "address": "127.0.0.1", "slots": 1}], mode="rank", nproc=1, world_size=1,
        python=sys.executable, ssh=None, check_nodes=False, control_dir=None, launch_timeout=0, stop_grace=1,
        paths=paths, start_timeout=1)
    (run_dir / PLAN_FILE).write_text(plan.to_json())
    over, everywhere, late = threading.Event(), threading.Event(), []

    def look_that_outlasts_the_launcher(*_args, **_kwargs):
        over.set()  # the launcher ended meanwhile
        time.sleep(1.1)  # and the look ran past start_timeout
        return ["here"]

    monkeypatch.setattr(supervisor, "nodes_without_ranks", look_that_outlasts_the_launcher)
    monkeypatch.setattr(supervisor, "START_FIRST_LOOK", 0.0)
    supervisor.Run(str(run_dir)).watch_start(os.getpid(), 1, late, over, everywhere)
    assert (late, everywhere.is_set()) == ([], False)


def test_a_stop_that_lands_as_the_run_ends_keeps_the_runs_own_outcome(tmp_path, supervisor_plan):
    # The launcher's last act is a stop to its supervisor; the run had ended by itself, with 0.
    launcher = "import os, signal; os.kill(os.getppid(), signal.SIGTERM); os._exit(0)"
    record = _supervised(supervisor_plan, tmp_path, "tf-unit-late-stop", [sys.executable, "-c", launcher], 0)
    assert (record["state"], record["rc"]) == ("succeeded", 0), record["msg"]


def test_a_run_that_fills_its_disk_still_records_how_it_ended(tmp_path, supervisor_plan):
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system for the run's directory needs root")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(small)], check=True)
    try:
        # The launcher writes until the disk is full, then ends well.
        fill = ("f = open('fill', 'wb')\ntry:\n    while True:\n        f.write(b'x' * 65536)\n        f.flush()\n"
                "except OSError:\n    pass\n")  # nothing printed: launcher.log is on the full disk too
        record = _supervised(supervisor_plan, small, "tf-unit-full", [sys.executable, "-c", fill], 0)
        assert (record["state"], record["rc"]) == ("succeeded", 0), record
        assert not (small / "tf-unit-full" / "state.reserve").exists()  # given back once used
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_a_hang_names_the_rank_the_flight_recorder_shows_outside_the_collective_though_it_never_printed():
    # Only rank 0 prints (if rank == 0: print), so progress knows rank 0 alone; every rank's
    # recorder says ranks 0, 1 and 3 entered collective #31 and rank 2 is at #30.
    progress = Progress(["n0", "n1"], 2, [2, 2], 60)
    progress.saw("/w/node0/x/attempt_0/0/stdout.log", 20, 100.0)
    taken = {rank: {"stacks": f'Current thread 0x1 (most recent call first):\n  File "t.py", line 9 in at_{rank}\n',
                    "entered": {"0": 30 if rank == 2 else 31}} for rank in range(4)}
    said = supervisor.hang_named(progress, progress.hung(200.0)["stopped_first"], taken, lambda t: f"T{t:.0f}")
    assert said["stopped_first"] == [2] and said["outside_collective"] == [2], said
    assert said["named"].startswith("rank 2 on n1 (no output); rank 2's stack: File \"t.py\", line 9 in at_2"), said["named"]
    assert "rank 2 not in collective #31 the others entered (its newest: #30" in said["named"], said["named"]
