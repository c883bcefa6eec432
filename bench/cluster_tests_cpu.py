"""Where the cluster tests' CPU goes: a pytest plugin that writes, for every test, its wall time,
the CPU of this worker's processes on the controller (pytest and every child it waited for:
Ansible, ssh, the torchfleet command) and of this worker's containers (their cgroups), and the
whole machine's busy CPU over the same time (which, with two workers, holds both).

    PYTHONPATH=bench pytest -p cluster_tests_cpu -n 2 --dist loadfile tests/integration
    python bench/cluster_tests_cpu.py           # the table, by file

Writes bench/results/cluster_tests_cpu/<worker>.jsonl (appended to; remove the folder for a new run).
`cluster_up` is the part of a test's wall time spent setting up the session's cluster.
A worker's containers are those whose name holds its pid (ready_cluster's `tfit<pid>`, and the
clusters tests make for themselves); a container restarted during a test (a node killed and
started again) starts a new cgroup, so its CPU before the restart is lost to the figures.
Docker's cgroup v1 layout (/sys/fs/cgroup/cpuacct/docker/ID), as on this machine.
"""

import collections
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parent / "results" / "cluster_tests_cpu"
CGROUPS = Path("/sys/fs/cgroup/cpuacct/docker")


def containers_cpu():
    """{container id: CPU seconds} of the running containers whose name holds this pid."""
    listed = subprocess.run(["docker", "ps", "--no-trunc", "--format", "{{.ID}} {{.Names}}"],
                            capture_output=True, text=True, check=False).stdout
    found = {}
    for line in listed.splitlines():
        cid, name = line.split()
        if str(os.getpid()) in name:
            try:
                found[cid] = int((CGROUPS / cid / "cpuacct.usage").read_text()) / 1e9
            except OSError:
                pass
    return found


def controller_cpu():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def machine_busy():
    with open("/proc/stat", encoding="ascii") as stat:
        fields = stat.readline().split()
    # user, nice, system, irq, softirq, in clock ticks (100 a second on Linux)
    return sum(int(fields[i]) for i in (1, 2, 3, 6, 7)) / 100


# Seconds the running test spent setting up the session's cluster (tests/integration/conftest.py's
# `cluster`, the worker's first test that asks for it): not the test file's own seconds.
CLUSTER_UP = {"seconds": 0.0}


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):  # pylint: disable=unused-argument
    started = time.monotonic()
    yield
    if fixturedef.argname == "cluster" and fixturedef.scope == "session":
        CLUSTER_UP["seconds"] += time.monotonic() - started


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # pylint: disable=unused-argument
    CLUSTER_UP["seconds"] = 0.0
    started, controller, containers, busy = time.monotonic(), controller_cpu(), containers_cpu(), machine_busy()
    yield
    after = containers_cpu()
    row = {"test": item.nodeid, "wall": time.monotonic() - started, "controller": controller_cpu() - controller,
           "containers": sum(seconds - containers.get(cid, 0) for cid, seconds in after.items()),
           "machine": machine_busy() - busy, "cluster_up": CLUSTER_UP["seconds"]}
    RESULTS.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(RESULTS / f"{worker}.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}) + "\n")


def main():
    rows = [json.loads(line) for name in sorted(RESULTS.glob("gw*.jsonl")) for line in name.read_text(encoding="utf-8").splitlines()]
    if not rows:
        sys.exit(f"no figures in {RESULTS}: run the tests with -p cluster_tests_cpu first (see the docstring)")
    files = collections.defaultdict(collections.Counter)
    for row in rows:
        totals = files[row["test"].split("::")[0].rsplit("/", 1)[-1]]
        totals.update(tests=1, wall=row["wall"], controller=row["controller"], containers=max(row["containers"], 0))
    print("| file | tests | wall s | controller CPU s | containers CPU s |\n| --- | --- | --- | --- | --- |")
    for name, totals in sorted(files.items(), key=lambda item: -item[1]["wall"]):
        print(f"| {name} | {totals['tests']} | {totals['wall']:.0f} | {totals['controller']:.0f} | {totals['containers']:.0f} |")
    print(f"\nall: wall {sum(r['wall'] for r in rows):.0f} s (both workers), controller {sum(r['controller'] for r in rows):.0f} s, "
          f"containers {sum(max(r['containers'], 0) for r in rows):.0f} s of CPU")


if __name__ == "__main__":
    main()
