"""What the benchmarks share: a command run and timed from the checkout's root (with the CPU it
cost the controller and the nodes), a play recap read, the commit measured."""

import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def run_timed(argv, env=None, cwd=REPO):
    """(wall seconds, result) of `argv`; a failure ends the benchmark with the end of its output,
    as no figure of a failed run means anything."""
    started = time.monotonic()
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    elapsed = round(time.monotonic() - started, 3)
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv[:2])} failed (rc {result.returncode}):\n{result.stdout[-3000:]}\n"
                 f"{result.stderr[-2000:]}")
    return elapsed, result


def node_cpu_seconds(containers):
    """CPU time the containers have used so far (cgroup v1 cpuacct, else v2 cpu.stat)."""
    total = 0.0
    for container in containers:
        cid = subprocess.run(["docker", "inspect", "-f", "{{.Id}}", container], capture_output=True, text=True,
                             check=False).stdout.strip()
        if not cid:  # gone: an empty id would name the cgroup of every container
            continue
        v1 = Path(f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage")
        v2 = Path(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat")
        if v1.exists():
            total += int(v1.read_text()) / 1e9
        elif v2.exists():
            total += int(re.search(r"usage_usec (\d+)", v2.read_text()).group(1)) / 1e6
    return total


def inventory_hosts(path):
    """The cluster group's hosts: on a local cluster, the containers' names."""
    return list(yaml.safe_load(Path(path).read_text())["all"]["children"]["cluster"]["hosts"])


def timed(argv, env, containers):
    """Wall time, the controller's CPU time (ansible-playbook and its ssh children) and the nodes',
    and the run's result."""
    nodes_before = node_cpu_seconds(containers)
    mine_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    elapsed, result = run_timed(argv, env)
    mine = resource.getrusage(resource.RUSAGE_CHILDREN)
    controller = mine.ru_utime + mine.ru_stime - mine_before.ru_utime - mine_before.ru_stime
    return elapsed, round(controller, 2), round(node_cpu_seconds(containers) - nodes_before, 2), result


def recap(output):
    """{host: {ok: N, changed: N, ...}} from the PLAY RECAP."""
    return {host: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", fields)}
            for host, fields in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M)}


def commit():
    """The checkout's commit, short, as the figures' label."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, check=False).stdout.strip()
