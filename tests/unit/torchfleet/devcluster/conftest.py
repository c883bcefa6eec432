"""The Docker CLI these modules call, answered from a table, for unit tests of their logic."""

import subprocess

import pytest


@pytest.fixture
def fake_docker(monkeypatch):
    """fake(module, answers): the module's `docker` answers each command (a tuple of its arguments)
    from answers, a (returncode, stdout) or a stdout, else with exit 0 and no output; it gives the
    list of the commands asked, in order."""
    def fake(module, answers):
        calls = []

        def docker(*args, check=True):  # pylint: disable=unused-argument
            calls.append(args)
            answer = answers.get(args, (0, ""))
            returncode, stdout = (0, answer) if isinstance(answer, str) else answer
            return subprocess.CompletedProcess(["docker", *args], returncode, stdout, "")
        monkeypatch.setattr(module, "docker", docker)
        return calls
    return fake
