"""The command's options and -e as ansible-playbook gets them."""

import json
import subprocess

from ansible.parsing.utils.yaml import from_yaml

from cli_helpers import NASTY, run_cli
from torchfleet.cli.parser import build_parser
from torchfleet.cli.playbooks import passwords, playbook_args


def test_script_args_reach_ansible_untemplated_byte_for_byte():
    parser = build_parser()
    args = parser.parse_args(["launch", "train.py", "-e", "nproc_per_node=1"])
    cmdline = playbook_args(args, script="/p/train.py", script_args=NASTY)
    assert cmdline[:2] == ["-e", "nproc_per_node=1"]
    assert cmdline[2] == "-e"
    data = from_yaml(cmdline[3])  # what ansible-playbook does with -e '{...}'
    assert data["script_args"] == NASTY and data["script"] == "/p/train.py"
    assert [type(item) for item in data["script_args"]] != [str] * 0
    assert all(isinstance(item, str) for item in data["script_args"])
    # !unsafe where Jinja could see a template: Ansible never templates them.
    assert '!unsafe "{{ 7*7 }}"' in cmdline[3] and '!unsafe "{% raw %}"' in cmdline[3]


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
