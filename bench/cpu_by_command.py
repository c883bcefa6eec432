"""CPU-seconds of every process that ended during a run, by command, from Linux process accounting:
where `make test`'s CPU goes, on the controller and in the containers (whose processes descend
from a containerd-shim), which bench/cluster_tests_cpu.py's per-test totals cannot split by program.

    apt-get install acct                       # accton, dump-acct
    touch /tmp/pacct && accton /tmp/pacct      # on: the kernel appends a record as each process ends
    make test                                  # or anything else
    accton off && dump-acct /tmp/pacct > /tmp/pacct.txt
    python bench/cpu_by_command.py /tmp/pacct.txt

A process still running when accounting stops (dockerd) is not counted. A record names the first
15 characters of the program (`ansible-playboo`); `python3.11` on the nodes is Ansible's modules
(the interpreter Ansible finds there), `python` there the environment's (ranks, torchrun).
"""

import argparse
import collections
import datetime

SHIM = "containerd-shim"


def records(path):
    """One dict per line of dump-acct's output: command, CPU-seconds, seconds alive, pid, ppid, start."""
    found = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            fields = [field.strip() for field in line.split("|")]
            if len(fields) < 15:
                continue
            found.append({
                "command": fields[0],
                # dump-acct gives user and system time, and the time alive, in clock ticks of 1/100 s.
                "cpu": (float(fields[2]) + float(fields[3])) / 100,
                "alive": float(fields[4]) / 100,
                "pid": int(fields[9]),
                "ppid": int(fields[10]),
                "start": datetime.datetime.strptime(fields[14], "%a %b %d %H:%M:%S %Y").timestamp(),
            })
    return found


def in_a_container(found):
    """The set of ids of records that descend from a containerd-shim. Pids are reused (pid_max is
    32,768 here), so a parent is the record of that pid alive when the child started."""
    by_pid = collections.defaultdict(list)
    for record in found:
        by_pid[record["pid"]].append(record)

    def parent(record):
        for candidate in by_pid.get(record["ppid"], ()):
            if candidate["start"] - 1 <= record["start"] <= candidate["start"] + candidate["alive"] + 2:
                return candidate
        return None

    inside = set()
    for record in found:
        ancestor, depth = parent(record), 0
        while ancestor is not None and depth < 100:
            if ancestor["command"].startswith(SHIM):
                inside.add(id(record))
                break
            ancestor, depth = parent(ancestor), depth + 1
    return inside


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("dump", help="dump-acct's output")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    found = records(args.dump)
    inside = in_a_container(found)
    where = {"controller": collections.Counter(), "containers": collections.Counter()}
    count = collections.Counter()
    for record in found:
        where["containers" if id(record) in inside else "controller"][record["command"]] += record["cpu"]
        count[record["command"]] += 1
    total = {name: sum(by_command.values()) for name, by_command in where.items()}
    print(f"{len(found)} processes, {sum(total.values()):.0f} CPU-s: controller {total['controller']:.0f}, "
          f"containers {total['containers']:.0f}")
    both = where["controller"] + where["containers"]
    print(f"{'command':16s} {'controller':>10s} {'containers':>10s} {'processes':>9s}")
    for command, _cpu in both.most_common(args.top):
        print(f"{command:16s} {where['controller'][command]:10.1f} {where['containers'][command]:10.1f} "
              f"{count[command]:9d}")


if __name__ == "__main__":
    main()
