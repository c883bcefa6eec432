"""A node read by the cluster tests: `docker exec` against tests/integration/node_reads.py, in one run.

The three reads the tests poll (a file's presence, a run record's text, the training account's
processes), each asked --calls times both ways, alternating, of one container started from the
node image. For each way it records the machine's CPU (all cores, /proc/stat: runc, dockerd and
the container count, not only this process) and the wall time per read, and prints the ratios.

    python bench/node_reads.py --calls 50

Writes bench/results/node_reads.json. Needs the node image (`make image`) and this machine's Docker.
"""

import argparse
import json
import subprocess
import sys
import time

from benchlib import REPO, commit  # bench/ is the script's directory, first on sys.path

sys.path.insert(0, str(REPO / "tests" / "integration"))
import node_reads  # noqa: E402 pylint: disable=wrong-import-position

IMAGE = "torchfleet/node:bookworm"
NODE = "tf-bench-node-reads"
RECORD = "/tmp/run/state.json"
CHECKPOINT = "/tmp/run/checkpoint.pt"


def machine_cpu_seconds():
    """CPU time of all cores so far, less idle and iowait."""
    fields = [int(value) for value in open("/proc/stat", encoding="ascii").readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / 100


def docker_exec(*argv):
    return subprocess.run(["docker", "exec", NODE, *argv], capture_output=True, text=True, check=False)


def by_docker_exec():
    return [docker_exec("test", "-f", CHECKPOINT).returncode == 0, docker_exec("cat", RECORD).stdout,
            docker_exec("pgrep", "-u", "root", "-a", "-f", "sleep").stdout.splitlines()]


def by_node_reads():
    return [node_reads.is_file(NODE, CHECKPOINT), node_reads.read_text(NODE, RECORD),
            node_reads.processes(NODE, "root", "sleep")]


WAYS = {"docker exec": by_docker_exec, "node_reads": by_node_reads}
READS = 3  # each way's reads a call


def measure(read_all, calls):
    cpu, started = machine_cpu_seconds(), time.monotonic()
    answers = [read_all() for _call in range(calls)]
    return machine_cpu_seconds() - cpu, time.monotonic() - started, answers[-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="reads of each kind, each way, each round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    subprocess.run(["docker", "rm", "-f", NODE], capture_output=True, check=False)
    subprocess.run(["docker", "run", "-d", "--name", NODE, "--entrypoint", "sh", IMAGE, "-c",
                    f"mkdir -p /tmp/run && echo '{{\"state\": \"running\"}}' > {RECORD} && exec sleep 3600"],
                   capture_output=True, check=True)
    totals = {way: [0.0, 0.0] for way in WAYS}
    try:
        time.sleep(1)
        answers = {}
        for _round in range(args.rounds):
            for way, read_all in WAYS.items():
                cpu, wall, answers[way] = measure(read_all, args.calls)
                totals[way][0] += cpu
                totals[way][1] += wall
        # Both ways must see the same node, or the figures compare nothing.
        assert answers["docker exec"] == answers["node_reads"], answers
    finally:
        subprocess.run(["docker", "rm", "-f", NODE], capture_output=True, check=False)
    reads = args.calls * args.rounds * READS
    figures = {way: {"machine_cpu_ms_per_read": round(cpu * 1000 / reads, 2),
                     "wall_ms_per_read": round(wall * 1000 / reads, 2)} for way, (cpu, wall) in totals.items()}
    slow, fast = figures["docker exec"], figures["node_reads"]
    result = {"commit": commit(), "reads": reads, "figures": figures,
              "cpu_ratio": round(slow["machine_cpu_ms_per_read"] / max(fast["machine_cpu_ms_per_read"], 0.01), 1),
              "wall_ratio": round(slow["wall_ms_per_read"] / max(fast["wall_ms_per_read"], 0.01), 1)}
    (REPO / "bench" / "results" / "node_reads.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
