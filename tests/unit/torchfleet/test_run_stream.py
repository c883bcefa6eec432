"""torchfleet/run_stream.py: the controller's side of following a run (pure logic): the ssh command
Ansible's connection builds for the head, the follower's command line there, the end report and
the exit code, and sudo's password on the stream's stdin."""

import json
import os
import subprocess
import sys

import pytest

from torchfleet import run_stream


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
    argv = run_stream.ssh_login("gpu01", {"ansible_host": "10.0.0.1", "ansible_port": 2222, "ansible_user": "admin",
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
    assert run_stream.ssh_login("gpu01", {})[0][-1] == "gpu01"


def test_ssh_argv_takes_ansibles_configuration_and_ansible_ssh_args(monkeypatch, tmp_path):
    # ansible.cfg's [ssh_connection] ssh_args (a bastion configured for Ansible alone), and the
    # variable that overrides it; a configuration that turns host key checking off is not obeyed.
    monkeypatch.delenv("ANSIBLE_SSH_ARGS", raising=False)
    config = tmp_path / "ansible.cfg"
    config.write_text("[defaults]\nhost_key_checking = False\n[ssh_connection]\n"
                      "ssh_args = -o ProxyJump=ops@bastion.example -o ServerAliveInterval=5\n")
    code = ("import json, sys; from torchfleet import run_stream; "
            "print(json.dumps(run_stream.ssh_login('gpu01', json.loads(sys.argv[1]))[0]))")
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
    argv, login = run_stream.ssh_login("gpu01", {}, user="ops", private_key="/k/ops")
    assert login == "ops" and 'User="ops"' in argv and 'IdentityFile="/k/ops"' in argv
    argv, login = run_stream.ssh_login("gpu01", {"ansible_user": "admin"}, user="ops")
    assert login == "admin" and 'User="admin"' in argv


def test_a_login_password_is_refused_by_name():
    with pytest.raises(run_stream.FollowError, match="login password \\(ansible_password\\).*ssh key"):
        run_stream.ssh_login("gpu01", {"ansible_password": "x"})


def test_remote_command_switches_to_the_training_account_only_when_needed():
    head = run_stream.Head("h", "torchfleet", "~torchfleet/torchfleet/runs", ["ssh", "h"])
    assert run_stream.remote_command(head, {"ansible_user": "root"}, ["follow", "x"]).startswith("python3 -S -c ")
    assert run_stream.remote_command(head, {"ansible_user": "torchfleet"}, ["follow", "x"]).startswith("python3 ")
    assert run_stream.remote_command(head, {"ansible_user": "admin"}, ["follow", "x"]).startswith(
        "sudo -n -u torchfleet -- python3 -S -c ")
    # The account ssh logs in as (Ansible's remote_user, -u) decides, and a become password
    # (-K, ansible_become_password) is read by sudo from the stream's stdin.
    head.login = "ops"
    assert run_stream.remote_command(head, {}, ["follow", "x"]).startswith("sudo -n -u torchfleet -- ")
    head.become_password = run_stream.become_password({"ansible_become_password": "s3"})
    assert head.become_password == "s3" and run_stream.become_password({}, "given") == "given"
    assert run_stream.remote_command(head, {}, ["follow", "x"]).startswith("sudo -S -p '' -u torchfleet -- ")


@pytest.mark.parametrize("record, code", [
    ({"state": "succeeded", "rc": 0}, 0),
    ({"state": "failed", "rc": 1, "failed_exit_code": 3}, 3),
    ({"state": "failed", "rc": 137, "failed_exit_code": None}, 137),
    ({"state": "stopped", "rc": 143}, 143),
    ({"state": "lost", "rc": None}, 1),
    ({"state": "failed", "rc": 0, "failed_exit_code": None}, 1),  # never 0 for a run that did not succeed
])
def test_exit_code_is_the_runs_own(record, code):
    assert run_stream.exit_code(record) == code


def test_end_report_names_the_cause_and_quotes_the_failing_log():
    out, err = run_stream.end_report({"run_id": "r", "state": "failed", "rc": 1, "world_size": 6, "duration": 2.5,
                                      "log_dir": "/runs/r", "msg": "rank 2 on n2 exited with code 3 first",
                                      "failed_log": "/runs/r/workers/x/attempt_0/0/stderr.log",
                                      "failed_host": "n2", "failed_log_tail": ["ModuleNotFoundError: No module named 'sympy'"]}, "n0")
    assert out == ["run r: rc 1, world size 6, 2.5 s, failed, logs in /runs/r on n0"]
    assert err[1] == "torchfleet: the last lines of /runs/r/workers/x/attempt_0/0/stderr.log on n2:"
    assert err[2] == "  ModuleNotFoundError: No module named 'sympy'"
    assert run_stream.end_report({"run_id": "r", "state": "succeeded", "rc": 0}, "n0")[1] == []
    named = {"stragglers": {"1": "rank 1 on n1: 0.50 steps/s over its last 30 s, the others 2.00 (their median)"}}
    assert run_stream.end_report({"run_id": "r", "state": "succeeded", "rc": 0, "progress": named}, "n0")[1] == [
        "torchfleet: straggler: rank 1 on n1: 0.50 steps/s over its last 30 s, the others 2.00 (their median)"]


def test_end_report_names_each_attempts_end_the_swaps_and_the_nodes_not_taken_back():
    attempts = [{"attempt": 0, "nodes": ["n0", "n1"], "ended": "t1", "cause": "n1 died at t1"},
                {"attempt": 1, "nodes": ["n0", "n2"], "ended": "t2", "cause": "n1 back (grown at a checkpoint)",
                 "joined": ["n2"], "left": ["n1"]},
                {"attempt": 2, "nodes": ["n0", "n1", "n2"], "ended": "t3", "cause": "", "joined": ["n1"]}]
    _out, err = run_stream.end_report({"run_id": "r", "state": "succeeded", "rc": 0, "attempts": attempts,
                                       "not_taken_back": {"n3": "another run is alive on it: r2"}}, "n0")
    assert err == ["torchfleet: attempt 0 on n0, n1 ended t1: n1 died at t1; restarted (n2 in, n1 out)",
                   "torchfleet: attempt 1 on n0, n2 ended t2: n1 back (grown at a checkpoint); restarted (n1 in)",
                   "torchfleet: n3 came back but was not taken back: another run is alive on it: r2"]


# A stand-in for `ssh HEAD COMMAND` (pure logic of follow(): what reaches ssh's stdin, and how its
# end is told): sudo -S would read the password first; this prints a run's end when it is right.
FAKE_SSH = ("import json, sys; given = sys.stdin.readline().rstrip('\\n'); "
            "ok = given == 's3cret'; print('E ' + json.dumps({'state': 'succeeded'})) if ok else "
            "sys.exit(sys.stderr.write('sudo: a password is required\\n') and 1)")


def test_follow_hands_the_become_password_to_sudo_on_stdin_and_says_why_it_failed():
    head = run_stream.Head("h", "torchfleet", "/runs", [sys.executable, "-c", FAKE_SSH], become_password="s3cret",
                           login="ops")
    assert run_stream.follow(head, {}, "tf-1", ranks="none")["state"] == "succeeded"
    head.become_password = "wrong"
    with pytest.raises(run_stream.FollowError, match=r"ssh exited 1: sudo: a password is required"):
        run_stream.follow(head, {}, "tf-1", ranks="none")


def _head_saying(text: str):
    """A head whose follower prints what the Python expression `text` makes (a stand-in for
    `ssh HEAD COMMAND`)."""
    return run_stream.Head("h", "torchfleet", "/runs", [sys.executable, "-c", f"import sys; sys.stdout.write({text})"])


@pytest.mark.parametrize("text, said", [
    ("'E ' + '[' * 100_000 + ']' * 100_000 + '\\n'", "nested too deep"),
    ("'E [1]\\n'", "not a JSON object"),
    ("'E {\\nE {}\\n'", "not JSON"),
    (f"'L ' + 'x' * {(8 << 20) + 1} + '\\nE {{}}\\n'", "longer than 8 MiB"),
])
def test_what_the_head_sends_is_read_within_bounds_and_refused_by_name(text, said):
    with pytest.raises(run_stream.FollowError, match=said):
        run_stream.follow(_head_saying(text), {}, "tf-1", on_line=lambda line: None)


def test_a_piece_without_its_text_is_no_crash():
    shown = []
    record = run_stream.follow(_head_saying("'P k\\nD \\nE {\"state\": \"succeeded\"}\\n'"), {}, "tf-1",
                               on_piece=lambda *piece: shown.append(piece))
    assert record == {"state": "succeeded"} and shown == [("P", "k", ""), ("D", "", "")]
