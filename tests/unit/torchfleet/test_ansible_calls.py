"""Calls of Ansible through ansible-runner: progress from the event stream, the fact cache."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchfleet import ansible_calls


def events():
    yield {"event": "playbook_on_task_start", "event_data": {"task": "Install"}}
    for host in ("n1", "n2"):
        yield {"event": "runner_on_start", "event_data": {"host": host, "task": "Install"}}
        yield {"event": "runner_on_ok", "event_data": {"host": host, "task": "Install",
                                                       "res": {"changed": host == "n1"}}}
    yield {"event": "runner_on_failed", "event_data": {"host": "n2", "task": "Check", "res": {"msg": "no GPU"}}}
    yield {"event": "runner_on_unreachable", "event_data": {"host": "n1", "task": "Check",
                                                            "res": {"msg": "ssh: timed out"}}}
    yield {"event": "playbook_on_stats", "event_data": {"changed": {"n1": 1}}}


@pytest.mark.parametrize("live", [False, True])
def test_progress_counts_hosts_and_keeps_failures(tmp_path, live):
    import io

    from torchfleet.ansible_calls import Progress
    stream = io.StringIO()
    progress = Progress(stream=stream, live=live)
    (tmp_path / "command").write_text('{"env": {"SECRET": "x"}}')
    progress._artifacts = tmp_path
    for event in events():
        progress(event)
    assert not (tmp_path / "command").exists()  # the environment never stays on disk
    assert (progress.hosts["n1"].done, progress.hosts["n1"].changed, progress.hosts["n1"].failed) == (2, 1, 1)
    assert progress.failures == {
        "n2": {"task": "Check", "msg": "no GPU", "unreachable": False},
        "n1": {"task": "Check", "msg": "ssh: timed out", "unreachable": True}}
    assert progress.stats == {"changed": {"n1": 1}}
    text = stream.getvalue()
    if live:
        assert "\x1b[2F" in text and "FAILED" in text  # redraws its two lines in place
    else:
        assert "torchfleet: Install\n" in text and "torchfleet: n2: FAILED: Check\n" in text


@pytest.mark.parametrize("live", [False, True])
def test_a_modules_warning_is_shown_whole(live):
    import io

    stream = io.StringIO()
    progress = ansible_calls.Progress(stream=stream, live=live, width=80)
    progress({"event": "runner_on_ok", "event_data": {"host": "n0", "task": "Start", "res": {}}})
    progress({"event": "runner_on_ok", "event_data": {"host": "n0", "task": "Launch", "res": {
        "warnings": ["run board entries not counted, as not their owners' or not entries: n1: 1 of nobody"]}}})
    text = stream.getvalue()
    assert ("torchfleet: n0: warning: run board entries not counted, as not their owners' or not entries: "
            "n1: 1 of nobody\n") in text
    if live:  # written over the hosts' line, which is drawn again below it
        assert text.index("\x1b[1F\x1b[J") < text.index("warning:") < text.rindex("n0 ")


def test_the_live_display_fits_80_columns_and_redraws_exactly_its_lines():
    import io
    import re

    from torchfleet.ansible_calls import Progress
    stream = io.StringIO()
    progress = Progress(stream=stream, live=True, width=80)
    long_task = "Install the Python environment from the wheelhouse the controller sent into the cluster"
    for host in ("gpu-node-with-a-long-name-0001.example.org", "n2"):
        for _count in range(3):
            progress({"event": "runner_on_ok", "event_data": {"host": host, "task": long_task, "res": {}}})
    frames = stream.getvalue().split("\x1b[2F")
    last = frames[-1]
    rows = [re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", row) for row in last.split("\n") if row]
    assert len(rows) == 2 and all(len(row) <= 79 for row in rows), rows
    assert rows[1].startswith("n2 ") and "3 tasks" in rows[1]


def test_the_fact_cache_is_never_in_the_directory_the_command_runs_from(tmp_path, monkeypatch):
    from torchfleet import ansible_calls as runner, collection

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert runner.fact_cache_dir() == collection.CHECKOUT / ".cache" / "facts"  # where the checkout's playbooks cache
    monkeypatch.setattr(runner, "checkout", lambda: None)  # installed from the wheel
    assert runner.fact_cache_dir() == tmp_path / "state" / "torchfleet" / "fact_cache"
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", "/srv/facts")
    assert runner.fact_cache_dir() == Path("/srv/facts")


def test_after_a_ctrl_c_the_calls_processes_end_in_whatever_session_they_run(tmp_path):
    # As ansible-core's workers: a session of their own, out of reach of ansible-runner's killpg.
    mark = str(tmp_path / "call")
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    own = subprocess.Popen(sleep, env=dict(os.environ, TORCHFLEET_CALL=mark), start_new_session=True)
    other = subprocess.Popen(sleep, env=dict(os.environ, TORCHFLEET_CALL=mark + "-another"), start_new_session=True)
    try:
        for pid in (own.pid, other.pid):  # exec'd: the environment is the child's own
            deadline = time.monotonic() + 10
            while b"TORCHFLEET_CALL=" not in Path(f"/proc/{pid}/environ").read_bytes():
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert ansible_calls.end_processes_of_call(mark) == [own.pid]
        assert own.wait(timeout=10) == -signal.SIGKILL
        assert other.poll() is None  # another call's process is left alone
    finally:
        for proc in (own, other):
            proc.kill()
            proc.wait(timeout=10)


def test_a_ctrl_c_before_the_launch_is_followed_is_heard_never_raised_and_no_playbook_runs(tmp_path, monkeypatch):
    # Raised mid-import it would leave a module half made (yaml's), and the stop would fail on it.
    import io

    monkeypatch.setattr(ansible_calls.tempfile, "tempdir", str(tmp_path))
    before = signal.getsignal(signal.SIGINT)
    try:
        ctrl_c = ansible_calls.CtrlC()
        os.kill(os.getpid(), signal.SIGINT)  # handled before the next bytecode: nothing raised
        assert ctrl_c.heard
        outcome = ansible_calls.call(playbook="torchfleet.cluster.launch", inventories=[], cmdline=[],
                                     progress=ansible_calls.Progress(stream=io.StringIO()), ctrl_c=ctrl_c)
        assert (outcome.rc, outcome.status, outcome.artifacts) == (130, "canceled", None)
        assert not list(tmp_path.iterdir())  # no private data dir left: ansible-runner never ran
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.follow()  # following the run: the Ctrl-C heard ends it now
    finally:
        signal.signal(signal.SIGINT, before)


def test_the_live_display_on_a_guarded_terminal_draws_its_own_escapes_and_shows_the_rest_as_text():
    import io

    from torchfleet.ansible_calls import Progress
    from torchfleet.screen import Inert
    terminal = io.StringIO()
    progress = Progress(stream=Inert(terminal), live=True, width=200)
    for _count in range(2):  # a task's name may hold what a node said (a templated item)
        progress({"event": "runner_on_ok", "event_data": {"host": "n1", "task": "Stop \x1b]0;pwned\x07", "res": {}}})
    assert terminal.getvalue() == ("\x1b[2Kn1   1 tasks   0 changed 0 failed ok     Stop \\x1b]0;pwned\\x07\n"
                                   "\x1b[1F\x1b[2Kn1   2 tasks   0 changed 0 failed ok     Stop \\x1b]0;pwned\\x07\n")


def test_every_setting_the_command_gives_ansible_is_one_ansible_reads(tmp_path):
    # A misspelt name is silently ignored (ANSIBLE_INTERPRETER_PYTHON was: Ansible reads
    # ANSIBLE_PYTHON_INTERPRETER), and the checkout's ansible.cfg hid it; from elsewhere, as an
    # installed wheel runs, only these settings hold.
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), **ansible_calls.ansible_env()}
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-config"), "dump", "--only-changed"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True)
    read = set(re.findall(r"\(env: (\w+)\)", done.stdout))
    given = {name for name in ansible_calls.ansible_env() if name.startswith("ANSIBLE_")}
    assert given <= read, (given - read, done.stdout)
