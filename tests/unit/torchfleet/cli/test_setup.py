"""`torchfleet setup`'s report of the playbook's hosts (the playbook itself: tests/integration)."""

import json

from torchfleet.ansible_calls import HostState, Outcome, Progress
from torchfleet.cli import setup
from torchfleet.cli.parser import build_parser


def outcome(rc):
    progress = Progress(hosts={"gpu01": HostState(done=40, changed=2), "gpu02": HostState(done=12, failed=1)},
                        stats={"changed": {"gpu01": 2}})
    if rc:
        progress.failures["gpu02"] = {"task": "Check GPUs", "msg": "no GPU", "unreachable": False}
    return Outcome(rc, "failed" if rc else "successful", progress, None)


def test_setup_reports_each_host_and_exits_with_the_playbooks_code(monkeypatch, capsys):
    monkeypatch.setattr(setup, "playbook", lambda args, name: outcome(2))
    rc = setup.setup_command(build_parser().parse_args(["setup"]))
    out, err = capsys.readouterr()
    assert rc == 2
    assert "gpu01                    40 tasks, 2 changed, 0 failed" in out
    assert "torchfleet: gpu02 failed at 'Check GPUs': no GPU" in err


def test_setup_json_carries_every_host(monkeypatch, capsys):
    monkeypatch.setattr(setup, "playbook", lambda args, name: outcome(0))
    assert setup.setup_command(build_parser().parse_args(["setup", "--json"])) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["hosts"]["gpu02"] == {"done": 12, "changed": 0, "failed": 1, "task": ""}
    assert said["changed"] == {"gpu01": 2} and said["rc"] == 0
