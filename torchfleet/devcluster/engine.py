"""The Docker engine the local cluster runs on: used where it answers; as root on Debian/Ubuntu,
installed and started in the background where it does not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

DOCKERD_LOG = Path("/var/log/torchfleet-dockerd.log")


class ClusterError(Exception):
    """A problem the user can act on; the message says what and how."""


def log(message: str) -> None:
    print(f"torchfleet: {message}", file=sys.stderr, flush=True)


def run(argv: list[str], *, check: bool = True, capture: bool = True, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, text=True, capture_output=capture, check=False, **kwargs)
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip() if capture else ""
        raise ClusterError(f"`{' '.join(argv)}` failed (exit {result.returncode}): {detail}")
    return result


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run(["docker", *args], check=check)


def engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return run(["docker", "info", "--format", "{{.ServerVersion}}"], check=False).returncode == 0


def debian_like() -> bool:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return False
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    # os-release quotes a value with double or single quotes, or not at all.
    ids = {fields.get("ID", "").strip("\"'")} | set(fields.get("ID_LIKE", "").strip("\"'").split())
    return bool(ids & {"debian", "ubuntu"})


def ensure_engine(wait_seconds: int = 90) -> None:
    """Use a running Docker engine; as root on Debian/Ubuntu, install and start one if needed."""
    if engine_answers():
        return
    if os.geteuid() != 0 or not debian_like():
        raise ClusterError(
            "no Docker engine answers. Install Docker (Debian/Ubuntu: `apt-get install docker.io`), "
            "start it (`systemctl start docker`) and make sure `docker info` works for this user."
        )
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        log("installing docker.io from the distribution's archive")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        run(["apt-get", "update", "-qq"], env=env)
        run(["apt-get", "install", "-y", "-qq", "docker.io"], env=env)
    log(f"starting dockerd in the background (log: {DOCKERD_LOG})")
    with open(DOCKERD_LOG, "ab") as out:
        subprocess.Popen(["dockerd"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        if engine_answers():
            return
        time.sleep(1)
    raise ClusterError(f"dockerd did not answer within {wait_seconds}s; see {DOCKERD_LOG}")
