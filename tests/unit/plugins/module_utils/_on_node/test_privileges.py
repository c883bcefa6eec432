"""privileges.py: root's privileges put down before a run's files are read. The tests run as root
(Docker needs it), so the follower they start as the controller sends it runs as root, over a
run directory of another account (nobody's) whose run.json a rank rewrote."""

import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils import _on_node
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import privileges as pv
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import record as rr
from torchfleet import run_stream

from run_helpers import running_record

NOBODY = pwd.getpwnam("nobody")


@pytest.fixture
def shared():
    """A directory every account can read (tmp_path is root's, 0700)."""
    base = tempfile.mkdtemp(prefix="tf-privileges-", dir="/tmp")
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base)


def test_the_account_is_the_tilde_name_or_the_owner_of_the_nearest_part_that_exists(shared):
    assert pv.account_of("~nobody/torchfleet/runs/r1") == "nobody"
    assert pv.account_of("~root/torchfleet/runs") is None
    mine = os.path.join(shared, "runs")
    os.mkdir(mine)
    os.chown(mine, NOBODY.pw_uid, NOBODY.pw_gid)
    assert pv.account_of(os.path.join(mine, "r1", "not", "yet")) == "nobody"
    # A link is the account's that made it, never where it points.
    os.symlink("/root", os.path.join(shared, "link"))
    os.lchown(os.path.join(shared, "link"), NOBODY.pw_uid, -1)
    assert pv.account_of(os.path.join(shared, "link")) == "nobody"
    assert pv.account_of(shared) is None  # root's, 0755: root's own runs


def test_a_directory_of_roots_that_others_write_is_refused_as_root(shared):
    board = os.path.join(shared, "logs")
    os.mkdir(board)
    os.chmod(board, 0o1777)
    with pytest.raises(pv.Refused, match="other accounts write there"):
        pv.account_of(board)


def test_the_path_is_walked_as_the_kernel_resolves_it_never_normalised_as_text(shared):
    # ~acct/L/../../..: L is the account's link to a deep directory of its own. As text the path is
    # `shared` (root's); the kernel resolves it inside the account's files.
    home = os.path.join(shared, "home")
    deep = os.path.join(home, "a", "b", "c")
    os.makedirs(deep)
    os.symlink(deep, os.path.join(home, "L"))
    subprocess.run(["chown", "-hR", f"{NOBODY.pw_uid}:{NOBODY.pw_gid}", home], check=True)
    assert pv.account_of(os.path.join(home, "L", "..", "..", "..")) == "nobody"
    # A link of root's to the account's directory is the account's, however root-owned the link.
    os.symlink(home, os.path.join(shared, "runs-link"))
    assert pv.account_of(os.path.join(shared, "runs-link", "r1")) == "nobody"
    # `..` inside root's own directories goes where the kernel goes.
    os.mkdir(os.path.join(shared, "roots"))
    assert pv.account_of(os.path.join(shared, "roots", "..", "home", "r1")) == "nobody"
    assert pv.account_of(os.path.join(shared, "roots", "..", "roots")) is None


def test_a_directory_of_roots_others_may_rename_in_is_refused_wherever_it_stands(shared):
    # Without the sticky bit, anyone may swap `sub` for their own between the look and the read.
    world = os.path.join(shared, "world")
    os.makedirs(os.path.join(world, "sub", "runs"))
    os.chmod(world, 0o777)
    with pytest.raises(pv.Refused, match="other accounts write there"):
        pv.account_of(os.path.join(world, "sub", "runs"))
    # With it, root's own entries there stay root's.
    os.chmod(world, 0o1777)
    assert pv.account_of(os.path.join(world, "sub", "runs")) is None


def test_root_following_a_rewritten_run_runs_nothing_of_the_account_as_root(shared):
    # A rank rewrote run.json: its ssh a program of the account's, its package the account's.
    marks = os.path.join(shared, "marks")
    os.mkdir(marks)
    os.chmod(marks, 0o1777)
    run_dir = os.path.join(shared, "home", "runs", "r1")
    package = os.path.join(shared, "home", "package", "_on_node")
    os.makedirs(package)
    os.makedirs(os.path.join(run_dir, "workers"))
    for name in _on_node.FILES:
        with open(os.path.join(package, f"{name}.py"), "w", encoding="utf-8") as handle:
            handle.write(_on_node.source(name))
    marker = os.path.join(shared, "home", "marker")
    with open(marker, "w", encoding="utf-8") as handle:
        handle.write(f"#!/bin/sh\nid -u > {marks}/ssh.$$\nexit 1\n")
    os.chmod(marker, 0o755)
    plan = {"package": package, "worker_files": True, "paths": {"workers": "/root/workers"}, "head": "n0",
            "nproc": 1, "nodes": [{"name": "n0", "address": "n0"}, {"name": "n1", "address": "n1"}],
            "python": sys.executable, "ssh": marker}
    with open(os.path.join(run_dir, "run.json"), "w", encoding="utf-8") as handle:
        json.dump(plan, handle)
    rr.write_state(run_dir, running_record(state="succeeded", rc=0, nodes=["n0", "n1"], slots=[1, 1]))
    subprocess.run(["chown", "-R", f"{NOBODY.pw_uid}:{NOBODY.pw_gid}", os.path.join(shared, "home")], check=True)
    head = run_stream.Head("h", "nobody", run_dir, ["ssh", "h"])
    argv = shlex.split(run_stream.remote_command(head, {"ansible_user": "root"}, ["print", run_dir, "all"]))
    assert os.geteuid() == 0 and argv[:3] == ["python3", "-S", "-c"]
    done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"}, check=False)
    assert json.loads(done.stdout.splitlines()[-1][2:])["state"] == "succeeded", done.stderr
    uids = [open(os.path.join(marks, name), encoding="utf-8").read().strip() for name in os.listdir(marks)]
    assert uids == [str(NOBODY.pw_uid)], (uids, done.stdout, done.stderr)


def test_root_refuses_a_run_in_a_directory_of_roots_others_write(shared):
    logs = os.path.join(shared, "logs")
    os.mkdir(logs)
    os.chmod(logs, 0o1777)
    head = run_stream.Head("h", "nobody", logs, ["ssh", "h"])
    argv = shlex.split(run_stream.remote_command(head, {"ansible_user": "root"}, ["print", logs]))
    done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"}, check=False)
    said = json.loads(done.stdout.splitlines()[-1][2:])
    assert said["state"] == "unknown" and "not followed as root" in said["msg"], done.stdout
