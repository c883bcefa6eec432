"""Which output a command shows, as the head's follower takes it."""

import subprocess
import sys

import pytest

from torchfleet.cli.parser import build_parser
from torchfleet.cli.following import shown_ranks


@pytest.mark.parametrize("argv, ranks", [
    (["logs"], "0"),
    (["logs", "--all-ranks"], "all"),
    (["logs", "--rank", "3"], "rank:3"),
    (["logs", "--node", "gpu02"], "node:gpu02"),
    (["launch", "train.py", "--all-ranks"], "all"),
    (["wait"], "0"),
])
def test_the_ranks_shown_follow_the_commands_options(argv, ranks):
    assert shown_ranks(build_parser().parse_args(argv)) == ranks


def test_once_an_interrupted_launch_has_stopped_its_run_a_late_ctrl_c_cannot_end_it_by_sigint():
    # The stop's playbook (stubbed) leaves a Python handler in place, as ansible-runner does; the
    # command then exits while a Ctrl-C arrives, after Python has reset its handlers.
    program = ("import os, signal, sys, types\n"
               "from torchfleet.cli import following\n"
               "def stop(*_args, **_kwargs):\n"
               "    signal.signal(signal.SIGINT, lambda *_: None)\n"
               "    return types.SimpleNamespace(rc=0)\n"
               "following.playbook = stop\n"
               "code = following.interrupted(None, 'tf-r1')\n"
               "class Late:  # a Ctrl-C once Python has put its signal handlers away\n"
               "    def __del__(self, kill=os.kill, pid=os.getpid(), sigint=signal.SIGINT):\n"
               "        kill(pid, sigint)\n"
               "late = Late()\n"
               "sys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert "torchfleet: run tf-r1 stopped" in done.stderr
