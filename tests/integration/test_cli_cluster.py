"""`torchfleet launch/status/stop/logs` through ansible-runner on a ready cluster.

Uses the session's `cluster` fixture (three nodes, set up once); with
TORCHFLEET_TEST_INVENTORY=inventory/local.yml it runs against that already set-up cluster instead.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TRAIN = ["--epochs", "1", "--use-syn", "--no-wandb"]
# Where a test proves what torchfleet does with a run, not training: ranks that print and sleep,
# with no torch to import (ticker.py says why).
TICKER = "tests/integration/ticker.py"

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def target(request):
    """(inventory, environment) of a cluster that setup has prepared."""
    given = os.environ.get("TORCHFLEET_TEST_INVENTORY")
    if given:
        return str(REPO / given), dict(os.environ)
    ready = request.getfixturevalue("cluster")
    return str(ready.inventory), ready.env


def torchfleet(target, *args, timeout=900):
    inventory, env = target
    command, rest = args[0], list(args[1:])
    argv = [sys.executable, "-m", "torchfleet", command, "-i", inventory, *rest]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


def test_launch_prints_rank0_report(target):
    result = torchfleet(target, "launch", "examples/train.py", "-e", "nproc_per_node=1", "--", *TRAIN)
    assert result.returncode == 0, result.stderr[-3000:]
    report = [line for line in result.stdout.splitlines() if line.startswith("TORCHFLEET_RESULT ")]
    assert report, result.stdout
    assert json.loads(report[-1].split(" ", 1)[1])["world_size"] == 3
    assert ": rc 0, world size 3" in result.stdout
    # Only the run's and torchfleet's words: none of Open MPI's own (its rsh launcher's setpgid
    # warning comes now and then in a healthy run; it stays in launcher.log alone).
    launcher_noise = re.compile(r"^\[[^\]\s]+:\d+\] plm:", re.M)
    assert not launcher_noise.search(result.stdout + result.stderr), result.stdout + result.stderr


def test_failed_rank_gives_its_own_exit_code_and_names_it(target):
    result = torchfleet(target, "launch", TICKER, "-e", "nproc_per_node=1", "--json",
                        "--", "--ticks", "5", "--sleep", "0.2", "--fail-on-rank", "1")
    assert result.returncode == 3  # ticker.py's --fail-on-rank exits with 3
    assert "rank 1 on " in result.stderr
    data = json.loads(result.stdout)
    assert data["result"]["failed_rank"] == 1 and data["rc"] == result.returncode
    assert data["result"]["state"] == "failed"


def test_a_refused_launch_exits_125_and_keeps_ansibles_output(target):
    result = torchfleet(target, "launch", "examples/train.py", "-e", "master_port=80", "--json", "--", *TRAIN)
    assert result.returncode == 125, result.stderr[-3000:]
    assert "master_port" in result.stderr
    data = json.loads(result.stdout)
    assert data["state"] is None and data["artifacts"] and Path(data["artifacts"]).is_dir()
    assert not (Path(data["artifacts"]) / "command").exists()  # it held the environment
    shutil.rmtree(Path(data["artifacts"]).parents[1])


ECHO = """import json, os, sys
if os.environ.get("RANK") == "0":
    print("ARGV " + json.dumps(sys.argv[1:]), flush=True)
    print("SECRET_SET", bool(os.environ.get("TF_TEST_SECRET")), flush=True)
    print("ROLE", os.environ.get("ROLE_NAME"), flush=True)  # torchrun's --role, from torchrun_extra_args
"""


def test_script_args_arrive_byte_for_byte_and_secrets_stay_off_disk(target, tmp_path):
    inventory, env = target
    env = dict(env, TF_TEST_SECRET="s3cret-value-that-must-not-leak")
    script = tmp_path / "tf_echo_args.py"
    script.write_text(ECHO)
    nasty = ["$(touch /tmp/x); rm -rf ~", "{{ 7*7 }}", "true", "", "--", "a 'b' \"c\"\n\td", "é✓"]
    result = torchfleet((inventory, env), "launch", str(script), "-e", "nproc_per_node=1",
                        "-e", '{"env_secrets": ["TF_TEST_SECRET"], "torchrun_extra_args": ["--role=echo"]}',
                        "--json", "--", *nasty)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    lines = data["report"]
    assert "ARGV " + json.dumps(nasty) in lines, lines
    assert "SECRET_SET True" in lines and "ROLE echo" in lines
    assert not Path("/tmp/x").exists() or Path("/tmp/x").stat().st_mtime < script.stat().st_mtime
    assert "s3cret-value" not in result.stdout + result.stderr
    assert data["artifacts"] is None  # a successful run leaves nothing behind


def test_failed_run_keeps_no_secret_in_its_record_or_logs(target):
    inventory, env = target
    env = dict(env, TF_TEST_SECRET="s3cret-value-that-must-not-leak")
    result = torchfleet((inventory, env), "launch", TICKER, "-e", "nproc_per_node=1",
                        "-e", '{"env_secrets": ["TF_TEST_SECRET"]}', "--json", "--", "--ticks", "5", "--sleep", "0.2",
                        "--fail-on-rank", "2")
    data = json.loads(result.stdout)
    assert result.returncode == 3 and data["result"]["failed_rank"] == 2
    assert data["artifacts"] is None  # the playbook started the run and succeeded
    assert "s3cret-value" not in result.stdout + result.stderr
    # The run's directory on the head (record, plan, logs): the value travels in environments only.
    logs = torchfleet((inventory, env), "logs", data["run_id"], "--all-ranks")
    assert logs.returncode == 0 and "TICKER_FAIL rank=2" in logs.stdout
    assert "s3cret-value" not in logs.stdout + logs.stderr
    if not os.environ.get("TORCHFLEET_TEST_INVENTORY"):
        from ready_cluster import NODES
        leaked = subprocess.run(["docker", "exec", NODES[0], "grep", "-rl", "s3cret-value",
                                 data["result"]["log_dir"]], capture_output=True, text=True, check=False)
        assert leaked.returncode == 1 and leaked.stdout == "", leaked.stdout + leaked.stderr


def test_status_stop_and_logs(target):
    inventory, env = target
    argv = [sys.executable, "-m", "torchfleet", "launch", TICKER, "-i", inventory,
            "-e", "nproc_per_node=1", "--", "--ticks", "1000"]
    long_run = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        alive = {}
        for attempt in range(60):
            status = torchfleet(target, "status", "--json")
            assert status.returncode == 0, status.stderr
            alive = json.loads(status.stdout)["runs"]
            if alive and all(alive.values()):
                break
        assert alive and all(alive.values()), alive
        run_id = next(iter(alive.values()))[0]
        stop = torchfleet(target, "stop", run_id)
        assert stop.returncode == 0, stop.stderr
        assert "Stopped on" in stop.stdout and run_id in stop.stdout
        assert long_run.wait(timeout=300) != 0
        status = torchfleet(target, "status", "--json")
        assert not any(json.loads(status.stdout)["runs"].values())
        logs = torchfleet(target, "logs", run_id)
        assert logs.returncode == 0 and logs.stdout.startswith(f"# {run_id}")
    finally:
        if long_run.poll() is None:
            long_run.kill()
            torchfleet(target, "stop")


def test_the_wheel_in_a_fresh_venv_outside_the_checkout_runs_doctor_on_the_cluster(target, tmp_path):
    # As a user installs it: the wheel built from the checkout, a new venv elsewhere, its own
    # dependencies from the package index; the checkout is not on any path.
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
                            str(REPO)], capture_output=True, text=True, timeout=900, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next((tmp_path / "dist").glob("torchfleet-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)],
                               capture_output=True, text=True, timeout=900, check=False)
    assert installed.returncode == 0, installed.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    inventory, env = target
    env = {key: value for key, value in env.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin"
    version = subprocess.run([str(venv / "bin" / "torchfleet"), "--version"], cwd=elsewhere, env=env,
                             capture_output=True, text=True, timeout=60, check=False)
    assert version.stdout.strip().startswith("torchfleet "), version.stderr
    doctor = subprocess.run([str(venv / "bin" / "torchfleet"), "doctor", "-i", inventory, "--json"], cwd=elsewhere,
                            env=env, capture_output=True, text=True, timeout=900, check=False)
    assert doctor.returncode in (0, 1), doctor.stdout[-2000:] + doctor.stderr[-3000:]
    report = json.loads(doctor.stdout)
    assert report["results"] and "missing" not in doctor.stderr, doctor.stderr[-2000:]
    # Its collection is the wheel's own copy, not the checkout's.
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "from torchfleet.collection import collection_root; print(collection_root())"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr
