"""main(): usage errors and exit codes, named with their fix, before anything runs."""

import os
import shutil
import subprocess
import sys

import pytest

from cli_helpers import run_cli
from torchfleet import __version__


def test_bad_option_exits_2_with_a_message(capsys):
    rc, out, err = run_cli(capsys, "launch", "--no-such-option", "train.py")
    assert rc == 2
    assert "unrecognized arguments: --no-such-option" in err


def test_missing_script_exits_2(capsys):
    rc, out, err = run_cli(capsys, "launch", "-i", "hosts.yml")
    assert rc == 2
    assert "required: SCRIPT" in err


def test_no_subcommand_exits_2(capsys):
    rc, out, err = run_cli(capsys)
    assert rc == 2 and "required" in err


def test_script_that_does_not_exist_exits_2(project, capsys):
    rc, out, err = run_cli(capsys, "launch", "nope.py", "-i", "hosts.yml")
    assert rc == 2
    assert "script nope.py not found" in err


def test_missing_inventory_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    rc, out, err = run_cli(capsys, "render", "train.py")
    assert rc == 2 and "no inventory" in err
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "missing.yml")
    assert rc == 2 and "missing.yml does not exist" in err


def test_script_args_only_for_launch_and_render(capsys):
    rc, out, err = run_cli(capsys, "status", "--", "--epochs", "1")
    assert rc == 2 and "takes no script arguments" in err


def test_bad_run_id_exits_2(project, capsys):
    rc, out, err = run_cli(capsys, "stop", "a;b", "-i", "hosts.yml")
    assert rc == 2 and "run id" in err


@pytest.mark.parametrize("argv, said", [
    (["stop", "tf-1", "--all"], "give a run id or --all, not both"),
    (["runs", "--keep", "3"], "add --prune"),
    (["runs", "--prune"], "--prune needs --keep N"),
    (["runs", "-n", "0"], "-n takes a number of at least 1"),
    (["runs", "--limit", "node1"], "--limit does not apply"),
    (["logs", "--rank", "1", "--all-ranks"], "not allowed with argument"),
    (["restart"], "the following arguments are required: RUN_ID"),
    (["restart", "a;b"], "run id"),
])
def test_usage_errors_name_the_fix(project, capsys, argv, said):
    rc, out, err = run_cli(capsys, *argv, "-i", "hosts.yml")
    assert rc == 2 and said in err, err


def test_version_completion_and_exit_codes_in_help(capsys):
    rc, out, err = run_cli(capsys, "--version")
    assert rc == 0 and out.strip() == f"torchfleet {__version__}"
    for command in ("launch", "wait", "logs", "stop", "runs", "status", "render", "setup"):
        rc, out, err = run_cli(capsys, command, "--help")
        assert rc == 0 and "exit: " in out, (command, out)
    # Shell completion through argcomplete (the completion extra), as bash asks for it.
    # It writes the words to descriptor 8.
    done = subprocess.run(["sh", "-c", '"$0" 8>&1 9>/dev/null', shutil.which("torchfleet")],
                          capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, COMP_LINE="torchfleet logs --ra", COMP_POINT="20",
                                   _ARGCOMPLETE="1", _ARGCOMPLETE_IFS="\n"))
    assert done.returncode == 0 and done.stdout.split() == ["--rank"], done.stdout + done.stderr


def test_a_ctrl_c_outside_a_commands_own_handling_exits_130_not_by_sigint():
    # The command's last act meets a Ctrl-C that its handlers never see (Python's handler back).
    program = ("import os, signal, sys\n"
               "import torchfleet.cli as cli\n"
               "def command(argv):\n"
               "    signal.signal(signal.SIGINT, signal.default_int_handler)\n"
               "    os.kill(os.getpid(), signal.SIGINT)\n"
               "    return 0\n"
               "cli.command = command\n"
               "sys.exit(cli.main([]))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 130, done.stderr
