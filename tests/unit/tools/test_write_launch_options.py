"""tools/write_launch_options.py: what it writes follows the option table (the role's spec and
defaults, launch.yml's names, validate.yml's list, run.yml's start of the module and the module's
documentation), and `--check` names each file out of date with the command that writes it."""

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("write_launch_options", REPO / "tools" / "write_launch_options.py")
writer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(writer)
lo = sys.modules[writer.module_documentation.__module__]  # the table the writer reads
WRITTEN = ("SPEC", "DEFAULTS", "PLAYBOOK", "VALIDATE", "RUN", "FRAGMENT", "REQUEST", "VARIABLES")


@pytest.fixture(name="copy")
def fixture_copy(tmp_path, monkeypatch):
    """The files the writer writes, copied under tmp_path (the checkout's left alone); returns
    {constant: the copy's path}."""
    monkeypatch.setattr(writer, "ROOT", tmp_path)
    paths = {}
    for name in WRITTEN:
        path = tmp_path / getattr(writer, name).relative_to(REPO)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(getattr(writer, name), path)
        monkeypatch.setattr(writer, name, path)
        paths[name] = path
    tasks = {}
    for state, original in writer.STATE_TASKS.items():
        tasks[state] = tmp_path / original.relative_to(REPO)
        shutil.copyfile(original, tasks[state])
    monkeypatch.setattr(writer, "STATE_TASKS", tasks)
    return paths


def _start(run_yml: str) -> dict:
    return yaml.safe_load(run_yml)[0]["torchfleet.cluster.torchrun_launch"]


def test_the_checkout_is_as_the_table_says():
    assert writer.main(["--check"]) == 0


@pytest.mark.parametrize("name, edit", [
    ("RUN", lambda text: text.replace('    detach: "{{ launch_detach }}"\n', "")),
    ("RUN", lambda text: text.replace("launch_min_nodes | int", "launch_min_nodes")),
    ("FRAGMENT", lambda text: text.replace("    default: 29500\n", "    default: 29501\n")),
    ("FRAGMENT", lambda text: text.replace("Seconds a restart waits", "Seconds a restart may wait")),
])
def test_a_stale_file_is_named_with_the_command_and_written_back(copy, capsys, name, edit):
    path = copy[name]
    written = path.read_text()
    path.write_text(edit(written))
    assert path.read_text() != written
    assert writer.main(["--check"]) == 1
    assert capsys.readouterr().err == (f"{path.relative_to(writer.ROOT)} is not what the launch option table says: "
                                       "run python tools/write_launch_options.py and commit the result\n")
    assert writer.main([]) == 0
    assert path.read_text() == written
    assert writer.main(["--check"]) == 0


def test_run_yml_keeps_what_is_outside_its_markers(copy):
    run = copy["RUN"]
    run.write_text(run.read_text().replace("  run_once: true\n", "  run_once: true\n  # a comment of the task's\n"))
    text = writer.run_text()
    assert "  run_once: true\n  # a comment of the task's\n" in text
    assert text.count(writer.ARGUMENTS_BEGIN) == 1 and 'state: started\n' in text


def test_run_yml_without_its_markers_is_refused_naming_them(copy):
    run = copy["RUN"]
    run.write_text(run.read_text().replace(writer.ARGUMENTS_END, ""))
    with pytest.raises(SystemExit, match="roles/launch/tasks/run.yml needs one line '# BEGIN options"):
        writer.run_text()


def test_run_yml_passes_the_module_what_the_table_says():
    start = _start(writer.RUN.read_text())
    assert start == {name: value for name, (value, _note) in lo.module_arguments().items()}
    assert start["detach"] == "{{ launch_detach }}" and start["state"] == "started"
    # The computed ones keep their comment, and a value too long for a line is folded as it was.
    text = writer.RUN.read_text()
    assert "    # Read from the controller's environment, here and nowhere else.\n    env_secrets:" in text
    assert "    file_contents: >-\n      {{ {} if launch_shared_storage | bool" in text
    assert "nproc_per_node" not in start and "network" not in start


def test_a_new_option_is_written_from_the_table_alone(copy, monkeypatch):
    new = lo.Option("warmup_steps", "int", "Steps before the timer starts.", default=5, short="warmup_steps",
                    module_doc=("Steps of the script before O(launch_timeout) counts: a colon: and # are text.",
                                "V(0) counts from the start."), version_added="1.1.0")
    monkeypatch.setattr(lo, "OPTIONS", (*lo.OPTIONS, new))
    assert writer.main(["--check"]) == 1
    assert writer.main([]) == 0
    documented = yaml.safe_load(writer.FRAGMENT.read_text().split('r"""', 1)[1].split('"""', 1)[0])["options"]
    assert documented["warmup_steps"] == {
        "description": ["Steps of the script before O(launch_timeout) counts: a colon: and # are text.",
                        "V(0) counts from the start."],
        "type": "int", "default": 5, "version_added": "1.1.0"}
    assert _start(writer.RUN.read_text())["warmup_steps"] == "{{ launch_warmup_steps }}"
    role = yaml.safe_load(writer.SPEC.read_text())["argument_specs"]["main"]["options"]["launch_warmup_steps"]
    assert role == {"type": "int", "default": 5, "description": "Steps before the timer starts."}
    assert "launch_warmup_steps: 5\n" in writer.DEFAULTS.read_text()
    assert "      warmup_steps: [launch_warmup_steps]\n" in writer.PLAYBOOK.read_text()
    assert "    warmup_steps: int = 5\n" in writer.REQUEST.read_text()  # the typed request's field
    assert "| `warmup_steps` | `launch_warmup_steps` |  | `5` | Steps before the timer starts. |\n" in writer.VARIABLES.read_text()
    assert "warmup_steps" not in writer.STATE_TASKS["stopped"].read_text()  # not also_for a stop
    assert writer.main(["--check"]) == 0


def test_a_value_is_written_in_a_form_that_reads_back():
    for value in ("{{ a }}", "plain", "{{ x if y else\n   z }}", "{{ first\nsecond }}", "a: b # c"):
        text = writer._argument("key", value)  # pylint: disable=protected-access
        assert yaml.safe_load(text.replace("    ", "", 1)) == {"key": value}, text
