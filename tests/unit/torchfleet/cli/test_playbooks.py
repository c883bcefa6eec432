"""The command's options and -e as ansible-playbook gets them, and its ad-hoc calls' arguments."""

import json
import subprocess
import sys

from ansible.parsing.utils.yaml import from_yaml

from cli_helpers import NASTY, run_cli, write_inventory
from torchfleet.cli.parser import build_parser
from torchfleet.cli.playbooks import adhoc, passwords, playbook_args


# Strings Ansible would run on the controller if it templated them, each touching a file: "{{ }}",
# and a "#jinja2:" header that makes a template without "{{" (the run id a node's process names).
def _templates(where):
    return [f"{{{{ lookup('pipe', 'touch {where}/braces') }}}}",
            f"#jinja2:variable_start_string:'[[',variable_end_string:']]'\n[[ lookup('pipe', 'touch {where}/header') ]]"]


PLAYBOOK = """- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.copy:
        content: "{{ {'script': script, 'script_args': script_args, 'run_id': run_id} | to_json }}"
        dest: "{{ out }}"
"""


def test_script_args_and_run_ids_reach_ansible_untemplated_byte_for_byte(tmp_path):
    parser = build_parser()
    args = parser.parse_args(["launch", "train.py", "-e", "nproc_per_node=1"])
    script_args = NASTY + _templates(tmp_path)
    cmdline = playbook_args(args, script="/p/train.py", script_args=script_args, run_id=_templates(tmp_path)[1],
                            out=str(tmp_path / "out.json"))
    assert cmdline[:2] == ["-e", "nproc_per_node=1"]
    data = from_yaml(cmdline[3])  # what ansible-playbook does with -e '{...}'
    assert data["script_args"] == script_args and data["script"] == "/p/train.py"
    # The real ansible-playbook, on this machine: every value arrives as given, none ran.
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    done = subprocess.run(["ansible-playbook", "-c", "local", "-i", "localhost,", "play.yml", *cmdline[2:],
                           "-e", f"ansible_python_interpreter={sys.executable}"],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    assert not (tmp_path / "braces").exists() and not (tmp_path / "header").exists()
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((tmp_path / "out.json").read_text()) == {
        "script": "/p/train.py", "script_args": script_args, "run_id": _templates(tmp_path)[1]}


def test_an_adhoc_calls_arguments_are_never_templated(tmp_path, monkeypatch):
    """The CLI's ad-hoc calls carry what nodes said (a run's log_dir, run ids): Ansible gets them
    as data, here through the real call of ansible.builtin.debug on this machine."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    write_inventory(tmp_path / "hosts.yml", {"node0": {"ansible_connection": "local",
                                                       "ansible_python_interpreter": sys.executable}})
    args = build_parser().parse_args(["runs", "-i", "hosts.yml"])
    given = {"msg": {"dirs": _templates(tmp_path), "n": 3, "yes": True}}
    outcome = adhoc(args, "ansible.builtin.debug", given, "cluster", [])
    assert not (tmp_path / "braces").exists() and not (tmp_path / "header").exists()
    assert outcome.rc == 0 and outcome.progress.results[0]["res"]["msg"] == given["msg"]


def test_vaulted_extra_vars_and_ansibles_own_options(project, capsys):
    (project / "pass.txt").write_text("s3cret\n")
    (project / "vars.yml").write_text("nproc_per_node: 3\nrun_id: from-the-vault\n")
    subprocess.run(["ansible-vault", "encrypt", "--vault-password-file", "pass.txt", "vars.yml"],
                   cwd=project, check=True, capture_output=True)
    assert (project / "vars.yml").read_text().startswith("$ANSIBLE_VAULT")
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "-e", "@vars.yml", "--json")
    assert rc == 1 and "-e @vars.yml is encrypted with Ansible Vault: give --vault-password-file" in err, err
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "-e", "@vars.yml",
                           "--vault-password-file", "pass.txt", "--json")
    assert rc == 0, err
    assert json.loads(out)["world_size"] == 6  # 3 workers on each of the two nodes
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "-e", "@vars.yml",
                           "--vault-password-file", "nowhere.txt")
    assert rc == 1 and "--vault-password-file nowhere.txt" in err, err
    # The options ansible-playbook takes reach it as given.
    args = build_parser().parse_args(["setup", "-u", "admin", "--private-key", "~/.ssh/k", "--forks", "50",
                                      "--vault-password-file", "pass.txt", "-K", "-e", "x=1"])
    assert playbook_args(args) == ["--user", "admin", "--private-key", "~/.ssh/k", "--forks", "50",
                                   "--vault-password-file", "pass.txt", "--ask-become-pass", "-e", "x=1"]
    args.become_password = "pw"
    assert list(passwords(args).values()) == ["pw"]
