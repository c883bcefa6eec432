"""A run's record and its output as followers see it: pure logic, and real files and processes
of this machine (no cluster)."""

import io
import json
import os
import subprocess
import sys
import threading
import time

import pytest
import yaml

from ansible_collections.torchfleet.cluster.plugins.module_utils import _head
from ansible_collections.torchfleet.cluster.plugins.module_utils._head import record as rr
from ansible_collections.torchfleet.cluster.plugins.modules import torchrun_run_info
from torchfleet import follow, inventory

TORCHRUN = {"nodes": ["n0", "n1", "n2"], "slots": [2, 2, 2], "mode": "torchrun", "nproc": 2}
RANK = {"nodes": ["n0", "n1"], "slots": [2, 3], "mode": "rank", "nproc": 2}


def running_record(run_id="r1", **changes):
    me = os.getpid()
    record = {"run_id": run_id, "state": "running", "rc": None, "supervisor_pid": me,
              "supervisor_start": rr.process_start(me), "boot_id": rr.boot_id(),
              "started_at": time.time(), **TORCHRUN}
    record.update(changes)
    return record


@pytest.mark.parametrize("line, expected", [
    # torchrun mode: Open MPI's tag names the node, torchrun's the local rank.
    ("[1,1]<stdout>:[default1]:epoch 1", (3, "n1", "epoch 1")),
    ("[1,0]<stdout>:[default0]:hello", (0, "n0", "hello")),
    ("[1,2]<stderr>:[default0]:Traceback", (4, "n2", "Traceback")),
    # torchrun's own line on a node: no rank.
    ("[1,2]<stderr>:W1123 torch/distributed/run.py:874] ***", (None, "n2", "W1123 torch/distributed/run.py:874] ***")),
    # mpirun's own words: neither.
    ("mpirun noticed that process rank 1 ...", (None, None, "mpirun noticed that process rank 1 ...")),
    ("", (None, None, "")),
])
def test_labelled_torchrun_mode(line, expected):
    assert rr.labelled(line, TORCHRUN) == expected


def test_labelled_hydra_tags_name_the_node_and_torchrun_the_worker():
    hydra = dict(TORCHRUN, mode="mpich")
    assert rr.labelled("[1] [default1]:epoch 1", hydra) == (3, "n1", "epoch 1")
    assert rr.labelled("[2] W1123 torchrun says", hydra) == (None, "n2", "W1123 torchrun says")
    assert rr.labelled("[mpiexec@node0] main: error", hydra) == (None, None, "[mpiexec@node0] main: error")
    assert rr.untagged(["[0] [default0]:zero", "[1,0]<stdout>:[3] kept"]) == ["[default0]:zero", "[3] kept"]


def test_labelled_rank_mode_maps_ranks_to_nodes_by_slots():
    assert rr.labelled("[1,0]<stdout>:a", RANK) == (0, "n0", "a")
    assert rr.labelled("[1,1]<stdout>:b", RANK) == (1, "n0", "b")
    assert rr.labelled("[1,2]<stdout>:c", RANK) == (2, "n1", "c")
    assert rr.labelled("[1,4]<stdout>:d", RANK) == (4, "n1", "d")
    assert rr.labelled("[1,9]<stdout>:e", RANK) == (9, None, "e")  # beyond the slots: no node


def test_open_mpis_setpgid_warning_is_never_shown_nor_quoted():
    # Open MPI 4.1's rsh launcher, in the middle of a healthy run (tests/unit/plugins/modules/captured).
    noise = "[node0:06697] plm:rsh: Warning: setpgid(6714,6714) failed in parent with errno=Permission denied(13)"
    assert {rr.shown(noise, TORCHRUN, ranks) for ranks in ("0", "all", "node:n0")} == {None}
    assert rr.untagged([noise, "[1,0]<stdout>:after it"]) == ["after it"]
    # Not every warning of the launcher's: another errno, or another message, is shown.
    other = noise.replace("Permission denied(13)", "No such process(3)")
    assert rr.shown(other, TORCHRUN, "0") == other


def test_shown_rank0_all_and_none():
    lines = ["[1,0]<stdout>:[default0]:zero", "[1,0]<stdout>:[default1]:one", "[1,1]<stdout>:[default0]:two",
             "[1,1]<stderr>:torchrun says", "mpirun: a node is gone"]
    assert [rr.shown(line, TORCHRUN, "0") for line in lines] == ["zero", None, None, None, "mpirun: a node is gone"]
    assert [rr.shown(line, TORCHRUN, "all") for line in lines] == [
        "[rank 0 n0] zero", "[rank 1 n0] one", "[rank 2 n1] two", "[n1] torchrun says", "mpirun: a node is gone"]
    assert {rr.shown(line, TORCHRUN, "none") for line in lines} == {None}


def test_state_is_written_whole_and_a_gone_supervisor_reads_as_lost(tmp_path):
    rr.write_state(str(tmp_path), running_record())
    assert rr.read_state(str(tmp_path))["state"] == "running"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no partial file left
    # A supervisor that died: its pid is gone (or reused by a process that started later).
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    rr.write_state(str(tmp_path), running_record(supervisor_pid=dead.pid, supervisor_start=1))
    assert rr.read_state(str(tmp_path))["state"] == "lost"
    rr.write_state(str(tmp_path), running_record(boot_id="another-boot"))  # the head rebooted
    assert rr.read_state(str(tmp_path))["state"] == "lost"
    rr.write_state(str(tmp_path), running_record(supervisor_pid=dead.pid, state="succeeded", rc=0))
    assert rr.read_state(str(tmp_path))["state"] == "succeeded"  # an ended run stays as it ended


def test_list_runs_newest_first_without_runs_that_have_no_record(tmp_path):
    for name, started in (("old", 1.0), ("new", 3.0), ("mid", 2.0)):
        (tmp_path / name).mkdir()
        rr.write_state(str(tmp_path / name), running_record(name, started_at=started, state="succeeded"))
    (tmp_path / "before-records").mkdir()
    assert [r["run_id"] for r in rr.list_runs(str(tmp_path))] == ["new", "mid", "old"]
    assert [r["run_id"] for r in rr.list_runs(str(tmp_path), "mid")] == ["mid"]
    assert rr.list_runs(str(tmp_path), "absent") == []
    assert rr.list_runs(str(tmp_path / "nowhere")) == []
    assert rr.newest_run(str(tmp_path)) == "new"


def test_follow_streams_lines_as_written_and_ends_with_the_record(tmp_path):
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    rr.write_state(str(run_dir), running_record())
    log = run_dir / "launcher.log"
    out = io.StringIO()
    follower = threading.Thread(target=rr.follow, args=(str(run_dir), "0", True), kwargs={"out": out})
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
    record = rr.follow(str(run_dir), "0", until_end=False, out=out)
    assert record["state"] == "running" and out.getvalue().startswith("L old\nE ")
    out = io.StringIO()
    rr.write_state(str(run_dir), running_record(state="succeeded", rc=0))
    rr.follow(str(run_dir), "0", from_start=False, out=out)
    assert out.getvalue().startswith("E ")


def test_follow_without_a_record_says_so(tmp_path):
    out = io.StringIO()
    record = rr.follow(str(tmp_path), wait_start=0.1, out=out)
    assert record["state"] == "unknown" and "no run record" in record["msg"]


def test_the_follower_runs_alone_as_the_controller_sends_it(tmp_path):
    # The torchfleet command runs the file's source with `python3 -S -c` on the head: it must need
    # nothing but the standard library.
    rr.write_state(str(tmp_path), running_record(state="succeeded", rc=0))
    (tmp_path / "launcher.log").write_text("[1,0]<stdout>:[default0]:hello\n")
    done = subprocess.run([sys.executable, "-S", "-c", _head.source("record"), "print", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, check=False)
    lines = done.stdout.splitlines()
    assert lines[0] == "L hello" and json.loads(lines[1][2:])["state"] == "succeeded", done.stderr


def test_a_record_of_an_older_run_reads_with_defaults_and_its_unset_keys_stay_out():
    record = rr.RunRecord.from_dict({"run_id": "r0", "state": "failed", "rc": 1, "msg": "m",
                                     "from_a_newer_version": 1})
    assert (record.run_id, record.rc, record.job_id, record.failed_log_tail, record.scheduler) == (
        "r0", 1, None, [], "none")
    assert "job_state" not in record.to_dict()  # an optional key appears once set
    assert record.updated(job_state="PENDING").to_dict()["job_state"] == "PENDING"
    with pytest.raises(TypeError):
        record.updated(no_such_key=1)


def test_the_keys_torchfleet_runs_lists_are_documented_keys_of_the_record():
    documented = set(yaml.safe_load(torchrun_run_info.RETURN)["runs"]["contains"])
    assert set(rr.RunRecord.keys(rr.LISTED)) <= documented <= set(rr.RunRecord.keys())


# ---------------------------------------------------------------------------------------------
# The controller's side (torchfleet/follow.py)
# ---------------------------------------------------------------------------------------------

def _options(argv):
    """ssh's `-o` settings in `argv`, in order; and what is left (the flags and the destination)."""
    options, rest, words = [], [], iter(argv[1:])
    for word in words:
        if word == "-o":
            options.append(next(words))
        else:
            rest.append(word)
    return options, rest


def test_ssh_argv_is_the_command_ansibles_ssh_connection_builds(monkeypatch):
    monkeypatch.delenv("ANSIBLE_SSH_ARGS", raising=False)
    argv = follow.ssh_login("gpu01", {"ansible_host": "10.0.0.1", "ansible_port": 2222, "ansible_user": "admin",
                                      "ansible_ssh_private_key_file": "/k/id",
                                      "ansible_ssh_common_args": "-o ProxyJump=bastion -o UserKnownHostsFile=/k/kh"})[0]
    options, rest = _options(argv)
    assert rest == ["-C", "10.0.0.1"]  # Ansible's default ssh_args keep compression on
    for wanted in ("Port=2222", 'IdentityFile="/k/id"', 'User="admin"', "ProxyJump=bastion",
                   "UserKnownHostsFile=/k/kh", "BatchMode=yes", "PasswordAuthentication=no"):
        assert wanted in options, (wanted, argv)
    # A connection of its own, first given so that it wins: never through a ControlPersist master.
    assert options[0] == "ControlPath=none", argv
    assert not any("StrictHostKeyChecking=no" in word for word in argv)
    assert follow.ssh_login("gpu01", {})[0][-1] == "gpu01"


def test_ssh_argv_takes_ansibles_configuration_and_ansible_ssh_args(monkeypatch, tmp_path):
    # ansible.cfg's [ssh_connection] ssh_args (a bastion configured for Ansible alone), and the
    # variable that overrides it; a configuration that turns host key checking off is not obeyed.
    monkeypatch.delenv("ANSIBLE_SSH_ARGS", raising=False)
    config = tmp_path / "ansible.cfg"
    config.write_text("[defaults]\nhost_key_checking = False\n[ssh_connection]\n"
                      "ssh_args = -o ProxyJump=ops@bastion.example -o ServerAliveInterval=5\n")
    code = ("import json, sys; from torchfleet import follow; "
            "print(json.dumps(follow.ssh_login('gpu01', json.loads(sys.argv[1]))[0]))")
    env = {**os.environ, "ANSIBLE_CONFIG": str(config)}
    argv = json.loads(subprocess.run([sys.executable, "-c", code, "{}"], env=env, capture_output=True,
                                     text=True, check=True).stdout)
    options = _options(argv)[0]
    assert options[1:3] == ["ProxyJump=ops@bastion.example", "ServerAliveInterval=5"], argv
    assert "ControlMaster=auto" not in options  # ssh_args replaces Ansible's defaults, as in Ansible
    assert not any("StrictHostKeyChecking=no" in option for option in options)
    env["ANSIBLE_SSH_ARGS"] = "-o ProxyJump=other"
    argv = json.loads(subprocess.run([sys.executable, "-c", code, '{"ansible_ssh_args": "-o ProxyJump=mine"}'],
                                     env=env, capture_output=True, text=True, check=True).stdout)
    assert _options(argv)[0][1] == "ProxyJump=mine", argv  # the host's variable over the environment


def test_ssh_login_takes_u_and_private_key_under_the_hosts_own_variables(monkeypatch):
    monkeypatch.delenv("ANSIBLE_SSH_ARGS", raising=False)
    argv, login = follow.ssh_login("gpu01", {}, user="ops", private_key="/k/ops")
    assert login == "ops" and 'User="ops"' in argv and 'IdentityFile="/k/ops"' in argv
    argv, login = follow.ssh_login("gpu01", {"ansible_user": "admin"}, user="ops")
    assert login == "admin" and 'User="admin"' in argv


def test_a_login_password_is_refused_by_name():
    with pytest.raises(follow.FollowError, match="login password \\(ansible_password\\).*ssh key"):
        follow.ssh_login("gpu01", {"ansible_password": "x"})


def test_head_account_reads_head_account_and_log_dir():
    hostvars = {"a": {"torchfleet_head": "b"}, "b": {}}
    assert inventory.head_account(["a", "b"], hostvars, {}) == ("b", "torchfleet", "~torchfleet/torchfleet/runs")
    head, user, log_dir = inventory.head_account(["a", "b"], hostvars, {"log_dir": "/scratch/runs", "cluster_user_name": "ml"})
    assert (user, log_dir) == ("ml", "/scratch/runs")
    with pytest.raises(inventory.InventoryError, match="torchfleet_head 'c'"):
        inventory.head_account(["a"], {"a": {"torchfleet_head": "c"}}, {})


def test_remote_command_switches_to_the_training_account_only_when_needed():
    head = follow.Head("h", "torchfleet", "~torchfleet/torchfleet/runs", ["ssh", "h"])
    assert follow.remote_command(head, {"ansible_user": "root"}, ["follow", "x"]).startswith("python3 -S -c ")
    assert follow.remote_command(head, {"ansible_user": "torchfleet"}, ["follow", "x"]).startswith("python3 ")
    assert follow.remote_command(head, {"ansible_user": "admin"}, ["follow", "x"]).startswith(
        "sudo -n -u torchfleet -- python3 -S -c ")
    # The account ssh logs in as (Ansible's remote_user, -u) decides, and a become password
    # (-K, ansible_become_password) is read by sudo from the stream's stdin.
    head.login = "ops"
    assert follow.remote_command(head, {}, ["follow", "x"]).startswith("sudo -n -u torchfleet -- ")
    head.become_password = follow.become_password({"ansible_become_password": "s3"})
    assert head.become_password == "s3" and follow.become_password({}, "given") == "given"
    assert follow.remote_command(head, {}, ["follow", "x"]).startswith("sudo -S -p '' -u torchfleet -- ")


@pytest.mark.parametrize("record, code", [
    ({"state": "succeeded", "rc": 0}, 0),
    ({"state": "failed", "rc": 1, "failed_exit_code": 3}, 3),
    ({"state": "failed", "rc": 137, "failed_exit_code": None}, 137),
    ({"state": "stopped", "rc": 143}, 143),
    ({"state": "lost", "rc": None}, 1),
    ({"state": "failed", "rc": 0, "failed_exit_code": None}, 1),  # never 0 for a run that did not succeed
])
def test_exit_code_is_the_runs_own(record, code):
    assert follow.exit_code(record) == code


def test_end_report_names_the_cause_and_quotes_the_failing_log():
    out, err = follow.end_report({"run_id": "r", "state": "failed", "rc": 1, "world_size": 6, "duration": 2.5,
                                  "log_dir": "/runs/r", "msg": "rank 2 on n2 exited with code 3 first",
                                  "failed_log": "/runs/r/workers/x/attempt_0/0/stderr.log",
                                  "failed_host": "n2", "failed_log_tail": ["ModuleNotFoundError: No module named 'sympy'"]}, "n0")
    assert out == ["run r: rc 1, world size 6, 2.5 s, failed, logs in /runs/r on n0"]
    assert err[1] == "torchfleet: the last lines of /runs/r/workers/x/attempt_0/0/stderr.log on n2:"
    assert err[2] == "  ModuleNotFoundError: No module named 'sympy'"
    assert follow.end_report({"run_id": "r", "state": "succeeded", "rc": 0}, "n0")[1] == []


def test_end_report_names_each_attempts_end_the_swaps_and_the_nodes_not_taken_back():
    attempts = [{"attempt": 0, "nodes": ["n0", "n1"], "ended": "t1", "cause": "n1 died at t1"},
                {"attempt": 1, "nodes": ["n0", "n2"], "ended": "t2", "cause": "n1 back (grown at a checkpoint)",
                 "joined": ["n2"], "left": ["n1"]},
                {"attempt": 2, "nodes": ["n0", "n1", "n2"], "ended": "t3", "cause": "", "joined": ["n1"]}]
    _out, err = follow.end_report({"run_id": "r", "state": "succeeded", "rc": 0, "attempts": attempts,
                                   "not_taken_back": {"n3": "another run is alive on it: r2"}}, "n0")
    assert err == ["torchfleet: attempt 0 on n0, n1 ended t1: n1 died at t1; restarted (n2 in, n1 out)",
                   "torchfleet: attempt 1 on n0, n2 ended t2: n1 back (grown at a checkpoint); restarted (n1 in)",
                   "torchfleet: n3 came back but was not taken back: another run is alive on it: r2"]


def test_a_run_whose_head_restarted_reads_as_lost_to_every_reader(tmp_path):
    record = rr.RunRecord(run_id="tf-r", command="c", nodes=["h"], slots=[1], head="h", mode="torchrun", nproc=1,
                          world_size=2, started="t", started_at=1.0, log_dir=str(tmp_path), launcher_log="l",
                          supervisor_pid=os.getpid(), supervisor_start=rr.process_start(os.getpid()),
                          boot_id="another-boot", msg="run tf-r is running")
    rr.write_state(str(tmp_path), record.to_dict())
    read = rr.read_state(str(tmp_path))
    assert read["state"] == "lost"
    assert read["msg"].startswith("run tf-r is lost: its supervisor is gone (the head restarted)")
    out, err = follow.end_report(read, "h")
    assert out == [f"run tf-r: rc -, world size 2, - s, lost, logs in {tmp_path} on h"]
    assert "is running" not in " ".join(out + err)


def test_follow_reads_a_large_log_in_chunks_and_delivers_every_line_once(tmp_path):
    run_dir = tmp_path / "big"
    run_dir.mkdir()
    rr.write_state(str(run_dir), running_record(state="succeeded", rc=0))
    long_line = "y" * (3 * rr.CHUNK // 2)  # a line longer than a chunk arrives whole
    with open(run_dir / "launcher.log", "w") as handle:
        for number in range(60_000):
            handle.write(f"[1,0]<stdout>:[default0]:line {number:06d} {'x' * 60}\n")
        handle.write(f"[1,0]<stdout>:[default0]:{long_line}\n[1,0]<stdout>:[default0]:the end, no newline")
    out = io.StringIO()
    rr.follow(str(run_dir), "0", out=out)
    lines = _as_piped(out)
    assert lines[:60_000] == [f"L line {number:06d} {'x' * 60}" for number in range(60_000)]
    assert lines[60_000:60_002] == [f"L {long_line}", "L the end, no newline"]
    assert json.loads(lines[-1][2:])["state"] == "succeeded" and len(lines) == 60_003


def _as_piped(out):
    """The follower's output as the torchfleet command shows it in a pipe: "L <line>" for each
    line (a redraw or a piece of a line a line of its own), then the "E <record>" line."""
    shown = []
    for raw in out.getvalue().splitlines():
        if follow.deliver(raw, lambda text: shown.append("L " + text)) is not None:
            shown.append(raw)
    return shown


def _worker_run(tmp_path, nodes=("n0",), ssh="ssh"):
    """A run whose ranks write only to torchrun's files (2 workers a node), as the module leaves
    it: run.json, the record, the package's record.py."""
    run_dir = tmp_path / "w1"
    package = tmp_path / "installed" / "_head"
    package.mkdir(parents=True)
    (package / "record.py").write_text(_head.source("record"))
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
    rr.follow(str(run_dir), "0", out=out)
    assert _as_piped(out)[:-1] == ["L zero 1", "L zero 2", "L zero, no newline"]
    out = io.StringIO()
    rr.follow(str(run_dir), "all", out=out)
    lines = _as_piped(out)[:-1]
    assert sorted(lines) == sorted(["L [n0] W1123 torchrun says", "L [rank 0 n0] zero 1", "L [rank 0 n0] zero 2",
                                    "L [rank 0 n0] zero, no newline", "L [rank 1 n0] one 1",
                                    "L [rank 1 n0] one's traceback"])


def test_worker_lines_are_whole_and_once_while_written_in_pieces(tmp_path):
    run_dir, workers = _worker_run(tmp_path)
    out = io.StringIO()
    follower = threading.Thread(target=rr.follow, args=(str(run_dir), "all", True), kwargs={"out": out})
    follower.start()
    big = "y" * (3 * rr.CHUNK // 2)
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
    follower = threading.Thread(target=rr.follow, args=(str(run_dir), "all", True), kwargs={"out": out})
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


def test_a_huge_line_is_clipped_where_a_record_quotes_it(tmp_path):
    from ansible_collections.torchfleet.cluster.plugins.module_utils._head import report
    workers = tmp_path / "workers"
    log = _worker_file(workers / "node0", 0)  # the head's own directory
    log.write_text("before\n" + "y" * 2**20 + "\nafter")
    paths = {"workers": str(workers), "launcher": str(tmp_path / "launcher.log")}
    quoted = report.output_tail(paths, worker_files=True)
    # The end of a log is read (256 KiB of it): the line as far as it was read, cut to 2000.
    assert quoted[0].startswith("y" * 2000 + "... (") and quoted[0].endswith(" characters more)"), quoted[0][-60:]
    assert quoted[-1] == "after" and all(len(line) < 2100 for line in quoted)
    assert report.rank0_tail("torchrun", paths)[-2].endswith("characters more)")


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
        rr.follow(str(run_dir), ranks, out=out, **kwargs)
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
    follower = threading.Thread(target=rr.follow, args=(str(run_dir), "all", True), kwargs={"out": out})
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


def _plan(**changes):
    values = {"run_id": "r1", "argv": ["mpirun"], "cwd": None, "command": "mpirun", "head": "n0",
              "nodes": [{"name": "n0", "address": "10.0.0.1", "slots": 2, "interface": "eth0"}],
              "mode": "torchrun", "nproc": 2, "world_size": 2, "python": "python3", "ssh": "ssh",
              "check_nodes": True, "control_dir": None, "launch_timeout": 0, "stop_grace": 10,
              "paths": {"run": "/r/r1", "launcher": "/r/r1/launcher.log", "ranks": "", "workers": "/r/r1/workers"},
              "launch_plan": {"nodes": []}}
    values.update(changes)
    return rr.SupervisorPlan(**values)


@pytest.mark.parametrize("record, plan, said", [
    (None, None, "no run r1 in /r on this node"),
    ({"state": "running"}, {}, "run r1 is running (its supervisor, pid None, holds it): stop it first"),
    ({"state": "succeeded"}, {}, "run r1 succeeded: there is nothing to restart"),
    ({"state": "failed"}, {"scheduler": "slurm"}, "it ran through Slurm"),
    ({"state": "lost"}, {"mode": "mpich"}, "it ran through MPICH's mpiexec"),
    ({"state": "failed"}, {"launch_plan": None}, "kept no launch plan"),
    ({"state": "lost"}, {}, None),
    ({"state": "stopped"}, {}, None),
])
def test_which_runs_a_restart_by_hand_takes(record, plan, said):
    from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_restart import restart_refusal

    found = restart_refusal(record, None if plan is None else _plan(**plan), "r1", "/r/r1")
    assert (found is None) if said is None else (said in found), found


def test_a_run_without_restarts_gets_its_one_attempt_from_its_record():
    from ansible_collections.torchfleet.cluster.plugins.module_utils._head.attempts import earlier_attempts

    failed = {"state": "failed", "started": "t0", "ended": "t1", "nodes": ["n0"], "world_size": 2,
              "failed_rank": 1, "failed_host": "n0", "failed_exit_code": 3, "rc": 1, "msg": "run r1 failed ..."}
    assert earlier_attempts(failed, _plan()) == [
        {"attempt": 0, "started": "t0", "ended": "t1", "nodes": ["n0"], "world_size": 2,
         "cause": "rank 1 on n0 exited with code 3", "workers": "/r/r1/workers"}]
    lost = dict(failed, state="lost", msg="run r1 is lost: its supervisor is gone")
    assert earlier_attempts(lost, _plan())[0]["cause"] == "run r1 is lost: its supervisor is gone"
    listed = [{"attempt": 0, "cause": "x"}, {"attempt": 1, "cause": "y"}]
    assert earlier_attempts(dict(failed, attempts=listed), _plan()) == listed


# A stand-in for `ssh HEAD COMMAND` (pure logic of follow(): what reaches ssh's stdin, and how its
# end is told): sudo -S would read the password first; this prints a run's end when it is right.
FAKE_SSH = ("import json, sys; given = sys.stdin.readline().rstrip('\\n'); "
            "ok = given == 's3cret'; print('E ' + json.dumps({'state': 'succeeded'})) if ok else "
            "sys.exit(sys.stderr.write('sudo: a password is required\\n') and 1)")


def test_follow_hands_the_become_password_to_sudo_on_stdin_and_says_why_it_failed():
    head = follow.Head("h", "torchfleet", "/runs", [sys.executable, "-c", FAKE_SSH], become_password="s3cret",
                       login="ops")
    assert follow.follow(head, {}, "tf-1", ranks="none")["state"] == "succeeded"
    head.become_password = "wrong"
    with pytest.raises(follow.FollowError, match=r"ssh exited 1: sudo: a password is required"):
        follow.follow(head, {}, "tf-1", ranks="none")
