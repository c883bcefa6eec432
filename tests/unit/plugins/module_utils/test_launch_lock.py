"""_launch_lock.py: the launch lock lives where only its account can write, and holds one start at a time."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_lock


def test_the_lock_has_one_place_whatever_the_environment_says(tmp_path, monkeypatch):
    # A login session (XDG_RUNTIME_DIR set) and a sudo (HOME kept as the caller's) hold one lock.
    home = _launch_lock.account_home()
    expected = os.path.join(home, ".local", "state", "torchfleet", "launch.lock")
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))
    assert _launch_lock.lock_path() == expected
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert _launch_lock.lock_path() == expected
    monkeypatch.setattr(_launch_lock, "account_home", lambda: str(tmp_path / "home"))
    fd = _launch_lock.hold("tf-1")
    try:
        found = os.stat(tmp_path / "home" / ".local" / "state" / "torchfleet")
        assert stat.S_IMODE(found.st_mode) == 0o700 and found.st_uid == os.getuid()
        with pytest.raises(_launch_lock.LaunchLocked, match="run tf-1"):
            _launch_lock.hold("tf-2")
    finally:
        _launch_lock.release(fd)


def test_a_lock_directory_of_another_account_is_refused_naming_it_and_the_fix(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another account needs root")
    monkeypatch.setattr(_launch_lock, "account_home", lambda: str(tmp_path))
    taken = tmp_path / ".local" / "state" / "torchfleet"
    taken.mkdir(parents=True)
    os.chown(taken, 65534, 65534)  # nobody made it first
    with pytest.raises(OSError, match=f"{taken} is not a directory of this account .*remove it"):
        _launch_lock.hold("tf-1")
    os.chown(taken, 0, 0)
    taken.chmod(0o777)
    _launch_lock.release(_launch_lock.hold("tf-1"))
    assert stat.S_IMODE(taken.stat().st_mode) == 0o700  # made the account's own again


def test_one_start_at_a_time_holds_the_launch_lock_and_names_its_run(tmp_path):
    lock = str(tmp_path / "launch.lock")
    held = _launch_lock.hold("tf-first", lock)
    # Another process, as a second launch on the head would be: refused, naming the first run.
    probe = ("import sys; from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_lock as l\n"
             "try:\n    l.hold('tf-second', sys.argv[1])\nexcept l.LaunchLocked as e:\n    print(e); sys.exit(3)")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[4] / ".collections"))
    second = subprocess.run([sys.executable, "-c", probe, lock], capture_output=True, text=True, env=env, check=False)
    assert second.returncode == 3, second.stderr
    assert second.stdout.startswith("run tf-first (started ")
    _launch_lock.release(held)
    assert _launch_lock.wait_free(1, lock)
    again = subprocess.run([sys.executable, "-c", probe, lock], capture_output=True, text=True, env=env, check=False)
    assert again.returncode == 0, again.stdout + again.stderr
