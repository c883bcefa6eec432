"""torchfleet/devcluster/engine.py: failed commands as errors that say what failed, and when a
Docker engine is used, refused with advice, installed or started. subprocess is a stand-in."""

import subprocess
from types import SimpleNamespace

import pytest

from torchfleet.devcluster import engine
from torchfleet.devcluster.engine import ClusterError


def fake_subprocess_run(monkeypatch, returncode, stdout="", stderr=""):
    calls = []

    def fake(argv, **kwargs):
        calls.append((argv, kwargs))
        return subprocess.CompletedProcess(argv, returncode, stdout, stderr)
    monkeypatch.setattr(engine.subprocess, "run", fake)
    return calls


def test_a_failed_command_names_itself_its_exit_status_and_its_stderr_else_its_stdout(monkeypatch):
    fake_subprocess_run(monkeypatch, 1, stdout="ignored", stderr="  Error: No such image: x\n")
    with pytest.raises(ClusterError) as raised:
        engine.run(["docker", "image", "inspect", "x"])
    assert str(raised.value) == "`docker image inspect x` failed (exit 1): Error: No such image: x"
    fake_subprocess_run(monkeypatch, 2, stdout="only on stdout\n")
    with pytest.raises(ClusterError, match=r"^`false` failed \(exit 2\): only on stdout$"):
        engine.run(["false"])
    calls = fake_subprocess_run(monkeypatch, 3, stdout="not captured")
    with pytest.raises(ClusterError) as raised:
        engine.run(["apt-get", "update"], capture=False)
    assert str(raised.value) == "`apt-get update` failed (exit 3): "
    assert calls[0][1]["capture_output"] is False


def test_docker_prepends_docker_and_with_check_false_hands_back_the_failed_result(monkeypatch):
    calls = fake_subprocess_run(monkeypatch, 125, stderr="no such container")
    result = engine.docker("start", "tf-lab-node0", check=False)
    assert result.returncode == 125
    assert calls[0][0] == ["docker", "start", "tf-lab-node0"]
    assert calls[0][1]["text"] is True and calls[0][1]["capture_output"] is True


def test_engine_answers_asks_docker_info_only_where_a_docker_client_is_installed(monkeypatch):
    calls = fake_subprocess_run(monkeypatch, 0)
    monkeypatch.setattr(engine.shutil, "which", lambda program: None)
    assert engine.engine_answers() is False
    assert not calls
    monkeypatch.setattr(engine.shutil, "which", lambda program: f"/usr/bin/{program}")
    assert engine.engine_answers() is True
    assert calls[0][0] == ["docker", "info", "--format", "{{.ServerVersion}}"]
    fake_subprocess_run(monkeypatch, 1, stderr="Cannot connect to the Docker daemon")
    assert engine.engine_answers() is False


def test_debian_like_takes_debian_and_ubuntu_from_id_or_id_like_of_os_release(tmp_path, monkeypatch):
    os_release = tmp_path / "os-release"
    monkeypatch.setattr(engine, "Path", lambda path: os_release if path == "/etc/os-release" else None)
    assert engine.debian_like() is False  # no such file
    os_release.write_text('NAME="Debian GNU/Linux"\nID=debian\n')
    assert engine.debian_like() is True
    os_release.write_text('ID="elementary"\nID_LIKE=ubuntu\n')
    assert engine.debian_like() is True
    os_release.write_text("ID='debian'\n")  # single quotes, as os-release allows
    assert engine.debian_like() is True
    os_release.write_text('ID="rocky"\nID_LIKE="rhel centos fedora"\n')
    assert engine.debian_like() is False


def test_without_an_engine_a_user_who_cannot_install_one_is_told_how_to_install_and_start_docker(monkeypatch):
    monkeypatch.setattr(engine, "engine_answers", lambda: False)
    monkeypatch.setattr(engine, "debian_like", lambda: True)
    monkeypatch.setattr(engine.os, "geteuid", lambda: 1000)
    with pytest.raises(ClusterError) as raised:
        engine.ensure_engine()
    message = str(raised.value)
    assert message.startswith("no Docker engine answers.")
    assert "`apt-get install docker.io`" in message and "`systemctl start docker`" in message
    monkeypatch.setattr(engine.os, "geteuid", lambda: 0)
    monkeypatch.setattr(engine, "debian_like", lambda: False)
    with pytest.raises(ClusterError, match="no Docker engine answers"):
        engine.ensure_engine()


def test_as_root_on_debian_an_installed_dockerd_is_started_in_the_background_until_docker_answers(tmp_path, monkeypatch):
    answers = iter([False, False, True])
    monkeypatch.setattr(engine, "engine_answers", lambda: next(answers))
    monkeypatch.setattr(engine, "debian_like", lambda: True)
    monkeypatch.setattr(engine.os, "geteuid", lambda: 0)
    monkeypatch.setattr(engine.shutil, "which", lambda program: f"/usr/bin/{program}")
    monkeypatch.setattr(engine, "DOCKERD_LOG", tmp_path / "dockerd.log")
    monkeypatch.setattr(engine, "run", lambda argv, **kwargs: pytest.fail(f"nothing is installed: {argv}"))
    started = []
    monkeypatch.setattr(engine.subprocess, "Popen", lambda argv, **kwargs: started.append((argv, kwargs)))
    monkeypatch.setattr(engine, "time", SimpleNamespace(monotonic=lambda: 0.0, sleep=lambda seconds: None))
    assert engine.ensure_engine() is None
    assert [argv for argv, kwargs in started] == [["dockerd"]]
    assert started[0][1]["start_new_session"] is True
    assert (tmp_path / "dockerd.log").exists()
    assert next(answers, "used up") == "used up"  # asked until it answered


def test_as_root_on_debian_without_docker_it_is_installed_and_a_silent_dockerd_names_its_log(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "engine_answers", lambda: False)
    monkeypatch.setattr(engine, "debian_like", lambda: True)
    monkeypatch.setattr(engine.os, "geteuid", lambda: 0)
    monkeypatch.setattr(engine.shutil, "which", lambda program: None)
    monkeypatch.setattr(engine, "DOCKERD_LOG", tmp_path / "dockerd.log")
    ran = []
    monkeypatch.setattr(engine, "run", lambda argv, **kwargs: ran.append((argv, kwargs["env"]["DEBIAN_FRONTEND"])))
    monkeypatch.setattr(engine.subprocess, "Popen", lambda argv, **kwargs: None)
    with pytest.raises(ClusterError) as raised:
        engine.ensure_engine(wait_seconds=0)
    assert ran == [(["apt-get", "update", "-qq"], "noninteractive"),
                   (["apt-get", "install", "-y", "-qq", "docker.io"], "noninteractive")]
    assert str(raised.value) == f"dockerd did not answer within 0s; see {tmp_path / 'dockerd.log'}"
