"""`torchfleet launch`'s own part before the playbook: the script, the run id, what the
playbook told back."""

from types import SimpleNamespace

import pytest

from torchfleet.cli.launch import launch_command, script_path, told_by_playbook
from torchfleet.cli.parser import build_parser
from torchfleet.cli.usage import UsageError


def test_a_script_here_goes_to_the_nodes_by_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    assert script_path("train.py") == str(tmp_path / "train.py")
    assert script_path("/shared/elsewhere.py") == "/shared/elsewhere.py"  # only on the nodes


def test_a_missing_script_or_a_bad_run_id_is_refused_before_ansible_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="script nope.py not found"):
        launch_command(build_parser().parse_args(["launch", "nope.py"]))
    (tmp_path / "train.py").write_text("")
    with pytest.raises(UsageError, match="run id 'a;b' is not valid"):
        launch_command(build_parser().parse_args(["launch", "train.py", "-e", "run_id=a;b"]))


def test_what_the_playbook_told_is_read_from_its_stats():
    told = {"head": "gpu01", "user": "trainer", "log_dir": "/runs", "connection": {}}
    outcome = SimpleNamespace(progress=SimpleNamespace(stats={"artifact_data": {"torchfleet_run": told}}))
    assert told_by_playbook(outcome) == told
    assert told_by_playbook(SimpleNamespace(progress=SimpleNamespace(stats={}))) is None
