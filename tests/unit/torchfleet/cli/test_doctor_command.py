"""torchfleet/cli/doctor.py: the `torchfleet doctor` command's table, JSON and exit codes, and how it
runs the doctor playbook (collect). ansible-runner is a stand-in where a test names it; the last
test runs the real playbook against an empty inventory. The doctor's judgement itself (_doctor.py)
is in tests/unit/plugins/module_utils/test_doctor.py (hence this file's name: test_doctor.py is taken)."""

import json
import os
from types import SimpleNamespace

import pytest

from torchfleet import ansible_calls
from torchfleet.cli import doctor


# --- table, JSON and exit codes ----------------------------------------------------------------

RESULTS = [
    {"check": "ssh", "host": "n0", "ok": True, "level": "pass", "reason": "logs in to n1", "fix": ""},
    {"check": "interfaces", "host": "all", "ok": True, "level": "info", "reason": "docker0 unusable", "fix": "none"},
    {"check": "port", "host": "n0", "ok": False, "level": "fail", "reason": "the rendezvous port 29500 is taken " * 5,
     "fix": "stop what holds it"},
]


def test_format_table():
    table = doctor.format_table(RESULTS, width=80)
    lines = table.splitlines()
    assert lines[0].split() == ["CHECK", "HOST", "STATUS", "REASON"]
    assert lines[1].split()[:3] == ["ssh", "n0", "PASS"]
    assert lines[2].split()[:3] == ["interfaces", "all", "INFO"]
    assert "fix: none" not in table  # a passed check shows no fix
    assert "fix: stop what holds it" in table
    assert all(len(line) <= 80 for line in lines)
    assert lines[-1] == "1 check(s) failed."
    assert doctor.format_table(RESULTS[:2]).splitlines()[-1] == "All checks passed."


def test_exit_codes():
    assert doctor.exit_code(RESULTS[:2]) == 0
    assert doctor.exit_code(RESULTS) == 1
    assert doctor.exit_code([]) == 0


def test_main_prints_json_and_exits_by_the_results(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "collect", lambda *a, **k: {"ok": False, "results": RESULTS})
    assert doctor.main(["-i", "whatever", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["results"] == RESULTS
    monkeypatch.setattr(doctor, "collect", lambda *a, **k: {"ok": True, "results": RESULTS[:2]})
    assert doctor.main(["-i", "whatever"]) == 0
    assert "All checks passed." in capsys.readouterr().out


def test_main_exits_2_when_the_doctor_cannot_run(tmp_path, capsys):
    assert doctor.main(["-i", str(tmp_path / "missing.yml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert doctor.main(["-i", str(tmp_path), "-e", "novalue"]) == 2


def test_main_exits_2_when_the_playbook_fails(tmp_path, capsys):
    empty = tmp_path / "empty.yml"
    empty.write_text("all:\n  hosts: {}\n")
    assert doctor.main(["-i", str(empty), "--json"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out)["ok"] is False
    assert "no hosts in group 'cluster'" in captured.err


def test_a_check_without_level_shows_pass_or_fail_and_only_failures_show_their_fix():
    table = doctor.format_table([{"check": "gpus", "host": "n1", "ok": False, "reason": "2 GPUs", "fix": "add two"},
                                 {"check": "port", "host": "n0", "ok": True, "reason": "free", "fix": "never shown"}])
    lines = table.splitlines()
    assert lines[1].split() == ["gpus", "n1", "FAIL", "2", "GPUs"]
    assert lines[2].split() == ["fix:", "add", "two"] and lines[2].index("fix:") == lines[1].index("2 GPUs")
    assert lines[3].split() == ["port", "n0", "PASS", "free"] and "never shown" not in table


def test_the_reason_column_keeps_at_least_30_characters():
    table = doctor.format_table([{"check": "c" * 60, "host": "h", "ok": True, "reason": "word " * 20}], width=40)
    lines = table.splitlines()
    reasons = [line[lines[0].index("REASON"):] for line in lines[1:-2]]
    assert len(reasons) == 4 and all(len(reason) <= 30 for reason in reasons)
    assert " ".join(reasons).split() == ["word"] * 20


@pytest.mark.parametrize("text, width, lines", [
    ("a bb ccc", 4, ["a bb", "ccc"]),
    ("a bb ccc", 8, ["a bb ccc"]),
    ("averyverylongword x", 5, ["averyverylongword", "x"]),  # a word is never cut
    ("", 10, [""]),
    ("   ", 10, [""]),
])
def test_wrap(text, width, lines):
    assert doctor._wrap(text, width) == lines


@pytest.mark.parametrize("output, line", [
    ('fatal: [n1]: FAILED! => {"msg": "boom"}\nPLAY RECAP', 'fatal: [n1]: FAILED! => {"msg": "boom"}'),
    ("[WARNING]: x\nERROR! the playbook: nope could not be found\nmore", "ERROR! the playbook: nope could not be found"),
    ("[WARNING]: Unable to parse /i as an inventory source\n[WARNING]: No inventory was parsed\n",
     "[WARNING]: Unable to parse /i as an inventory source"),
    ("[WARNING]: first\n[WARNING]: second\n", "[WARNING]: second"),
    ("line one\n  last line  \n\n", "last line"),
    ("", "no output"),
])
def test_last_error_picks_the_most_telling_line(output, line):
    assert doctor._last_error(output) == line


def test_last_error_is_cut_at_500_characters():
    assert doctor._last_error("ERROR! " + "x" * 900) == "ERROR! " + "x" * 493


def test_the_parser_defaults():
    args = doctor.build_parser().parse_args([])
    assert (args.inventory, args.master_port, args.extra_vars, args.json) == ("inventory", None, [], False)
    args = doctor.build_parser().parse_args(["-i", "hosts.yml", "-p", "29600", "-e", "a=1", "-e", "b=2", "--json"])
    assert (args.inventory, args.master_port, args.extra_vars, args.json) == ("hosts.yml", 29600, ["a=1", "b=2"], True)


@pytest.fixture
def playbook(monkeypatch, tmp_path):
    """ansible_calls.call as a stand-in: it records its arguments and writes `report` (text) where
    the playbook would, then exits `rc` with `output` in the progress' tail."""
    state = SimpleNamespace(report='{"ok": true, "results": []}', rc=0, output=["PLAY [doctor]"], calls=[])

    def call(**kwargs):
        variables = json.loads(kwargs["cmdline"][1])
        state.calls.append(dict(kwargs, variables=variables))
        if state.report is not None:
            with open(variables["doctor_report"], "w", encoding="utf-8") as handle:
                handle.write(state.report)
        kwargs["progress"].tail.extend(state.output)
        return SimpleNamespace(rc=state.rc)
    monkeypatch.setattr(ansible_calls, "call", call)
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    monkeypatch.chdir(tmp_path)
    return state


def test_collect_runs_the_playbook_and_reads_its_report(playbook, tmp_path):
    playbook.report = '{"ok": true, "head": "n0", "results": [{"check": "ssh"}]}'
    assert doctor.collect("hosts.yml", master_port="29600", extra_vars={"x": 1}) == {
        "ok": True, "head": "n0", "results": [{"check": "ssh"}]}
    (call,) = playbook.calls
    assert call["playbook"] == "torchfleet.cluster.doctor" and call["inventories"] == [str(tmp_path / "hosts.yml")]
    assert call["cmdline"][0] == "-e" and call["keep_on_failure"] is False
    assert call["variables"]["x"] == 1 and call["variables"]["master_port"] == 29600
    assert not os.path.exists(call["variables"]["doctor_report"])  # its temporary directory is gone
    doctor.collect(tmp_path / "hosts.yml")
    assert "master_port" not in playbook.calls[-1]["variables"]


def test_collect_says_why_the_playbook_failed(playbook):
    playbook.rc, playbook.report = 2, None
    playbook.output = ["TASK [x]", 'fatal: [n1]: UNREACHABLE! => {"msg": "ssh: connect to host n1 port 22"}', "PLAY RECAP"]
    with pytest.raises(doctor.DoctorError) as raised:
        doctor.collect("hosts.yml")
    assert str(raised.value) == ('the doctor playbook failed (exit code 2): fatal: [n1]: UNREACHABLE! => '
                                 '{"msg": "ssh: connect to host n1 port 22"}')
    assert raised.value.output == "\n".join(playbook.output)
    playbook.rc, playbook.output = 0, ["PLAY RECAP"]  # finished, but wrote no report
    with pytest.raises(doctor.DoctorError, match=r"failed \(exit code 0\): PLAY RECAP"):
        doctor.collect("hosts.yml")


def test_collect_refuses_a_report_it_cannot_read(playbook):
    playbook.report = "{not json"
    with pytest.raises(doctor.DoctorError, match="the doctor's report could not be read"):
        doctor.collect("hosts.yml")


def test_collect_needs_ansible_playbook(playbook, monkeypatch, tmp_path):
    monkeypatch.setattr(ansible_calls, "ansible_env", lambda: {"PATH": str(tmp_path / "empty")})
    with pytest.raises(doctor.DoctorError, match="ansible-playbook was not found"):
        doctor.collect("hosts.yml")
    assert playbook.calls == []


def test_main_prints_why_it_could_not_run_with_ansibles_output(monkeypatch, capsys):
    def fails(*args, **kwargs):
        raise doctor.DoctorError("the doctor playbook failed (exit code 4): x", "x" * 5000)
    monkeypatch.setattr(doctor, "collect", fails)
    assert doctor.main(["-i", "whatever", "--json"]) == doctor.DOCTOR_ERROR
    out, err = capsys.readouterr()
    assert json.loads(out) == {"ok": False, "error": "the doctor playbook failed (exit code 4): x", "results": []}
    assert "torchfleet doctor could not run: the doctor playbook failed" in err and "x" * 3000 + "\n" in err
    assert "x" * 3001 not in err


def test_main_hands_the_port_and_extra_vars_to_collect(monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(doctor, "collect", lambda inventory, **kwargs: seen.update(kwargs, inventory=inventory) or {})
    assert doctor.main(["-i", "hosts.yml", "-p", "29600", "-e", "a=1", "-e", '{"b": [2]}']) == doctor.OK
    assert seen == {"inventory": "hosts.yml", "master_port": 29600, "extra_vars": {"a": "1", "b": [2]}}
    assert capsys.readouterr().out.strip().endswith("All checks passed.")  # no results: nothing failed
