"""tools/write_launch_options.py: what it writes follows the option table, and `--check` names a
module option that run.yml does not hand to the module."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("write_launch_options", REPO / "tools" / "write_launch_options.py")
writer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(writer)


def test_the_checkout_is_as_the_table_says():
    assert writer.main(["--check"]) == 0
    assert writer.unpassed_options() == []


def test_an_option_run_yml_does_not_pass_is_named_with_its_fix(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run.yml"
    run.write_text(writer.RUN.read_text().replace('    detach: "{{ launch_detach }}"\n', ""))
    monkeypatch.setattr(writer, "RUN", run)
    assert writer.unpassed_options() == ["detach"]
    monkeypatch.setattr(writer, "ROOT", tmp_path)
    assert writer.main(["--check"]) == 1
    assert 'run.yml does not pass the module option detach (launch_detach is lost): add `detach: "{{ launch_detach }}"`' \
        in capsys.readouterr().err
