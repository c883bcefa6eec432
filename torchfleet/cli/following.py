"""Following a run from the command: the head as the stream reaches it, the output shown until
the run ends, its end report and exit code; a Ctrl-C of an attached launch stops the run."""

from __future__ import annotations

import argparse
import collections
import json
import sys

from torchfleet.cli.playbooks import playbook
from torchfleet.cli.usage import INTERRUPTED, UsageError

JSON_REPORT_LINES = 1000  # the last lines of a run that --json reports carry


def stream_head(args: argparse.Namespace, name: str, user: str, log_dir: str, hostvars: dict):
    """The head as the stream reaches it: Ansible's ssh for it, with -u, --private-key and -K."""
    from torchfleet import run_stream

    try:
        ssh, login = run_stream.ssh_login(name, hostvars, getattr(args, "user", None),
                                          getattr(args, "private_key", None))
    except run_stream.FollowError as error:
        raise UsageError(str(error)) from None
    return run_stream.Head(name=name, user=user, log_dir=log_dir, ssh=ssh, login=login,
                           become_password=run_stream.become_password(hostvars, getattr(args, "become_password", None)))


def follow_target(args: argparse.Namespace) -> dict:
    """The head and the ssh that reaches it, from the inventory (see inventory.cluster_vars)."""
    from torchfleet.inventory import cluster_vars

    found = cluster_vars(args.inventory, args.extra_vars)
    return {"head": stream_head(args, found["head"], found["user"], found["log_dir"], found["hostvars"]),
            "hostvars": found["hostvars"]}


def shown_ranks(args: argparse.Namespace) -> str:
    """Which output a command shows, as the head's follower takes it."""
    if getattr(args, "rank", None) is not None:
        return f"rank:{args.rank}"
    if getattr(args, "node", None):
        return f"node:{args.node}"
    return "all" if getattr(args, "all_ranks", False) else "0"


def follow_to_end(args, found, run_id, record=None, ranks=None, from_start=True,
                  stop_on_interrupt=False) -> int:
    """Stream the run (rank 0, or every rank) until it ends, then its end report; the run's
    own exit code. `record`: the run had ended already, print its report only."""
    from torchfleet import run_stream, screen

    head = found["head"]
    ranks = ranks or shown_ranks(args)
    shown: collections.deque[str] = collections.deque(maxlen=JSON_REPORT_LINES)  # memory bounded whatever the run writes
    live = None if args.json or not screen.is_terminal(sys.stdout) else screen.Live()

    def on_line(text):
        if args.json:
            shown.append(text)
        elif live:
            live.line(text)
        else:
            print(text, flush=True)
    try:
        if record is None:
            record = run_stream.follow(head, found["hostvars"], run_id, ranks, from_start, on_line,
                                       tail=getattr(args, "tail", None), on_piece=live and live.piece)
        elif ranks == "0":  # it ended before it could be followed: rank 0's last lines instead
            for line in record.get("rank0_tail") or []:
                on_line(line)
    except KeyboardInterrupt:
        if live:  # the bars left as they read, before any word of torchfleet's below them
            live.close()
        if stop_on_interrupt:
            return interrupted(args, run_id)
        print(f"torchfleet: stopped following; run {run_id or '(newest)'} goes on", file=sys.stderr)
        return INTERRUPTED
    except run_stream.FollowError as error:
        print(f"torchfleet: {error}; the run goes on: torchfleet logs -f {run_id or ''}".rstrip(),
              file=sys.stderr)
        return 255
    finally:
        if live:
            live.close()
    if record.get("state") == "unknown":
        print(f"torchfleet: {record.get('msg')}", file=sys.stderr)
        return 1
    out, err = run_stream.end_report(record, head.name)
    if args.json:
        from torchfleet.collection import module_util

        run_record = module_util("_on_node.record")
        keys = run_record.RunRecord.keys(run_record.REPORTED)
        print(json.dumps({"run_id": record.get("run_id"), "rc": run_stream.exit_code(record),
                          "report": (list(shown) or record.get("rank0_tail") or []) + out,
                          "result": {key: record.get(key) for key in keys}, "artifacts": None}, indent=1))
    else:
        run_stream.print_lines(out)
    run_stream.print_lines(err, sys.stderr)
    return run_stream.exit_code(record)


def interrupted(args: argparse.Namespace, run_id: str) -> int:
    """Ctrl-C in an attached launch: stop the run everywhere, as mpirun and torchrun do."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the stop short
    print(f"torchfleet: interrupted: stopping run {run_id} on every node", file=sys.stderr, flush=True)
    outcome = playbook(args, "launch", launch_action="stop", run_id=run_id)
    # ansible-runner put a Python handler of its own in place for the stop, which Python resets to
    # the default as it exits: a Ctrl-C then (a second one, or the first delivered late) would end
    # the command by SIGINT instead of this code. The stop is done; nothing is left to interrupt.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if outcome.rc == 0:
        print(f"torchfleet: run {run_id} stopped", file=sys.stderr)
    else:
        from torchfleet.ansible_calls import print_failures
        print_failures(outcome)
        print(f"torchfleet: run {run_id} may still run: torchfleet stop {run_id}", file=sys.stderr)
    return INTERRUPTED
