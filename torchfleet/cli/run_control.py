"""`torchfleet stop`, `wait`, `logs` and `status`: ending, waiting for and reading runs, and
which runs are alive on which node."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile

from torchfleet import node_values
from torchfleet.cli.following import follow_target, follow_to_end, shown_ranks
from torchfleet.cli.playbooks import adhoc, finish, playbook
from torchfleet.cli.runs import read_runs, run_status
from torchfleet.cli.usage import ACTIVE_STATES, UsageError, check_run_id


def alive_runs(args: argparse.Namespace):
    """(the ansible-runner outcome, {node: [run ids alive there]}), asked of every node as the
    training account (in a container root may not read other users' /proc/PID/environ). A run id
    is what a process of that account says it is: one not shaped as a run id is left out, named."""
    from torchfleet.inventory import cluster_vars

    found = cluster_vars(args.inventory, args.extra_vars)
    outcome = adhoc(args, "torchfleet.cluster.torchrun_launch", {"state": "stopped"}, found["group"],
                    ["--check", "--become", "--become-user", found["user"]])
    alive: dict[str, list[str]] = {}
    for item in outcome.progress.results:
        alive[item["host"]] = []
        for run in item["res"].get("runs", []):
            try:
                alive[item["host"]].append(node_values.run_id(run.get("run_id") if isinstance(run, dict) else None))
            except node_values.NodeValueError as error:
                print(f"torchfleet: {item['host']}: left out: {error}", file=sys.stderr)
    return outcome, alive


def stop_command(args: argparse.Namespace) -> int:
    fixed = {"launch_action": "stop"}
    if args.run_id and args.all:
        raise UsageError("give a run id or --all, not both")
    if args.run_id:
        check_run_id(args.run_id)
        fixed["run_id"] = args.run_id
    elif not args.all:
        # As scancel and sky cancel: a bare stop ends the one run alive, never several at once.
        outcome, alive = alive_runs(args)
        if outcome.rc != 0:
            return finish(args, outcome, {})
        runs = sorted({run_id for ids in alive.values() for run_id in ids})
        if not runs:
            print("torchfleet: no run is alive on any node", file=sys.stderr)
            return 0
        if len(runs) > 1:
            print(f"torchfleet stop: {len(runs)} runs are alive: {', '.join(runs)}; stop one "
                  f"(torchfleet stop RUN_ID) or every one (torchfleet stop --all)", file=sys.stderr)
            return 2
        fixed["run_id"] = runs[0]
        print(f"torchfleet: stopping run {runs[0]}, the one alive", file=sys.stderr)
    outcome = playbook(args, "launch", **fixed)
    said = [item["res"].get("msg", "") for item in outcome.progress.results
            if item.get("action") == "ansible.builtin.debug"]
    if not args.json:
        for line in said:
            print(line)
    return finish(args, outcome, {"stopped": said})


def wait_command(args: argparse.Namespace) -> int:
    if args.run_id:
        check_run_id(args.run_id)
    return follow_to_end(args, follow_target(args), args.run_id, ranks="none")


def logs_command(args: argparse.Namespace) -> int:
    """The run's output (rank 0's, or every rank's), its end report if it has ended; with -f
    it follows the run until it ends and exits with its code."""
    from torchfleet import run_stream

    if args.run_id:
        check_run_id(args.run_id)
    if (args.rank is not None and args.rank < 0) or (args.tail is not None and args.tail < 1):
        raise UsageError("--rank takes a rank (0 or more), --tail a number of lines (1 or more)")
    if args.stacks:
        if not args.run_id or args.follow:
            raise UsageError("--stacks takes a RUN_ID, and no -f: the stacks are taken once, when the run hung")
        return print_stacks(args)
    found = follow_target(args)
    if args.follow:
        return follow_to_end(args, found, args.run_id, from_start=not args.since_now)
    head = found["head"]
    # The header names the state, known at the end: the lines wait in a file past a few MiB.
    with tempfile.SpooledTemporaryFile(max_size=8 << 20, mode="w+", encoding="utf-8") as lines:
        try:
            record = run_stream.follow(head, found["hostvars"], args.run_id, shown_ranks(args),
                                       on_line=lambda text: lines.write(text + "\n"), until_end=False,
                                       tail=args.tail)
        except run_stream.FollowError as error:
            record = {"state": "unknown", "msg": str(error)}
        if record.get("state") == "unknown":
            print(f"torchfleet: no log of {'run ' + args.run_id if args.run_id else 'any run'} on "
                  f"{head.name}: {record.get('msg')}", file=sys.stderr)
            return 1
        print(f"# {record['run_id']} ({record['state']})", flush=True)
        lines.seek(0)
        shutil.copyfileobj(lines, sys.stdout)
    if record.get("state") in ACTIVE_STATES:
        print(f"torchfleet: run {record['run_id']} is still running (torchfleet logs -f follows it)",
              file=sys.stderr)
    else:
        out, err = run_stream.end_report(record, head.name)
        run_stream.print_lines(out + err, sys.stderr)
    return 0


def print_stacks(args: argparse.Namespace) -> int:
    """Every rank's stacks of each attempt of the run that hung, as its supervisor took them."""
    outcome, _found, runs = read_runs(args, args.run_id, stacks=True)
    if outcome.rc != 0:
        return finish(args, outcome, {})
    if not runs:
        print(f"torchfleet: no run {args.run_id} on the head (torchfleet runs lists them)", file=sys.stderr)
        return 1
    taken = next((item["res"].get("stacks") for item in outcome.progress.results), None) or {}
    if not taken:
        print(f"torchfleet: no stacks of run {args.run_id}: none of its attempts hung", file=sys.stderr)
        return 1
    for attempt, ranks in taken.items():
        for rank, text in ranks.items():
            print(f"# {args.run_id} {attempt.replace('_', ' ')}, rank {rank}")
            print(text.rstrip("\n"), flush=True)
    return 0


def status_command(args: argparse.Namespace) -> int:
    if args.run_id:
        check_run_id(args.run_id)
        return run_status(args)
    outcome, alive = alive_runs(args)
    # Other accounts' runs on each node, from its run board: shown, never this account's to stop.
    others = {item["host"]: item["res"].get("others", []) for item in outcome.progress.results}
    # Slurm's queue, the same from every node: every account's jobs.
    queue: list = next((item["res"]["queue"] for item in outcome.progress.results if item["res"].get("queue")), [])
    if not args.json:
        for host in sorted(alive):
            said = alive[host] + [f"{entry['run_id']} (account {entry['account']}, {entry['state']})"
                                  for entry in others.get(host, [])]
            print(f"{host:<24} {', '.join(said) if said else 'idle'}")
        for job in queue:
            print(f"slurm job {job['job_id']:<6} {job['state']:<10} account {job['user']:<14} {job['name']}")
    return finish(args, outcome, {"runs": alive, "others": others, "jobs": queue})
