"""The one-node cluster of test_torchrun_launch_local.py: this machine, its own non-loopback
address as the node, two slots; the torchrun_launch module called through real Ansible, and the
run processes it leaves found and ended."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.processes import find_run_processes, stop_processes

REPO = Path(__file__).resolve().parents[2]
MODULE = "torchfleet.cluster.torchrun_launch"
ANSIBLE = str(Path(sys.executable).with_name("ansible")) \
    if Path(sys.executable).with_name("ansible").exists() else shutil.which("ansible")
LIMIT = 120  # seconds: generous bounds for polls, never expected to be reached

SCRIPT = """\
import hashlib, os, signal, sys, time
rank = int(os.environ["RANK"])
print(f"RANK={rank} WORLD_SIZE={os.environ['WORLD_SIZE']} RUN={os.environ['TORCHFLEET_RUN_ID']}",
      flush=True)
if "TF_TEST_SECRET" in os.environ:
    print("SECRET_SHA256=" + hashlib.sha256(os.environ["TF_TEST_SECRET"].encode()).hexdigest(),
          flush=True)
action = os.environ.get("TF_TEST_ACTION", "")
if action == "leak":
    print("LEAKED=" + os.environ["TF_TEST_SECRET"], flush=True)
if rank == 1 and action == "exit":
    print("rank 1 gives up", file=sys.stderr, flush=True)
    sys.exit(3)
if rank == 1 and action == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if action == "sleep":
    time.sleep(3600)
if action == "nap":
    time.sleep(8)
restarts = int(os.environ.get("TORCHFLEET_RESTART_COUNT", "0"))
print(f"ATTEMPT={restarts}", flush=True)
if rank == 1 and action == "fail-twice" and restarts < 2:
    sys.exit(3)
"""


def local_address() -> str:
    # A UDP "connect" sends nothing; it only asks the kernel which source address it would use.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("192.0.2.254", 9))
        address = sock.getsockname()[0]
    assert not address.startswith("127."), "these tests need a non-loopback IPv4 address"
    return address


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def alive(run_id: str) -> list[dict]:
    return find_run_processes({run_id})


def poll(condition, what: str, limit: float = LIMIT):
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


def wait_for_ranks(run_id: str):
    poll(lambda: len([p for p in alive(run_id) if "train.py" in p["cmdline"]]) == 2,
         f"both ranks of {run_id}")


class Cluster:
    """Runs the module on localhost through `ansible`, one call per run."""

    def __init__(self, tmp_path: Path):
        assert ANSIBLE, "ansible (ansible-core) is needed next to this Python or on PATH"
        assert shutil.which("mpirun"), "Open MPI's mpirun is needed: apt-get install openmpi-bin"
        self.tmp = tmp_path
        self.script = tmp_path / "train.py"
        self.script.write_text(SCRIPT)
        self.runs_dir = tmp_path / "runs"
        self.run_ids: list[str] = []
        self.background: list[subprocess.Popen] = []

    def args(self, **overrides) -> dict:
        run_id = f"it-{uuid.uuid4().hex[:10]}"
        self.run_ids.append(run_id)
        args = {"nodes": [{"name": "here", "address": local_address(), "slots": 2}],
                "head": "here", "mode": "rank", "script": str(self.script),
                "python": sys.executable, "run_id": run_id, "master_port": free_port(),
                "log_dir": str(self.runs_dir), "allow_run_as_root": os.geteuid() == 0,
                "launch_timeout": 600, "stop_grace": 5}
        args.update(overrides)
        if args.get("run_id") and args["run_id"] not in self.run_ids:
            self.run_ids.append(args["run_id"])
        return args

    def command(self, args: dict, tree: Path, check: bool) -> list[str]:
        argv = [ANSIBLE, "localhost", "-i", "localhost,", "-c", "local", "-m", MODULE,
                "-a", json.dumps(args), "-t", str(tree), "-v",
                "-e", f"ansible_python_interpreter={sys.executable}"]
        return argv + (["--check"] if check else [])

    def run(self, args: dict, check: bool = False):
        """(ansible's rc, its stdout+stderr, the module's result)."""
        tree = self.tmp / f"tree-{uuid.uuid4().hex[:8]}"
        done = subprocess.run(self.command(args, tree, check), cwd=REPO, env=self.env(),
                              capture_output=True, text=True, timeout=600, check=False)
        output = done.stdout + done.stderr
        assert (tree / "localhost").exists(), output
        return done.returncode, output, json.loads((tree / "localhost").read_text())

    def start(self, args: dict):
        """Start a run in the background, in a session of its own like a terminal's job."""
        tree = self.tmp / f"tree-{uuid.uuid4().hex[:8]}"
        proc = subprocess.Popen(self.command(args, tree, False), cwd=REPO, env=self.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        self.background.append(proc)
        return proc, tree

    @staticmethod
    def env() -> dict:
        return {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}

    def cleanup(self):
        for proc in self.background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=LIMIT)
        # A supervisor exits a moment after its last record: a few seconds' grace, no more.
        deadline = time.monotonic() + 5
        while (left := find_run_processes(set(self.run_ids))) and time.monotonic() < deadline:
            time.sleep(0.2)
        if left:
            stop_processes(left, 1)
        return left


def rank_text(result: dict, rank: int) -> str:
    """A rank's stdout file without Open MPI's --tag-output tag ("[1,0]<stdout>:")."""
    return re.sub(r"(?m)^\[\d+,\d+\]<\w+>:", "", rank_file(result, rank).read_text())


def rank_file(result: dict, rank: int, stream: str = "stdout") -> Path:
    return Path(result["rank_logs_dir"]) / "1" / f"rank.{rank}" / stream


# ---------------------------------------------------------------------------------------------


def module_pid(run_id: str) -> int:
    """The launcher's parent is the run's supervisor, whose parent is the module (while it runs)."""
    launcher = poll(lambda: [p for p in alive(run_id) if p["cmdline"].startswith("mpirun ")],
                    "the launcher")[0]
    return ppid(ppid(launcher["pid"]))


def record_of(cluster, run_id: str) -> dict:
    return json.loads((cluster.runs_dir / run_id / "state.json").read_text())


def ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
