"""`torchfleet launch` and `restart`: the launch playbook starts the run detached on the head,
then the command follows it to its end (following.py) unless --detach."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from torchfleet.cli.following import follow_target, follow_to_end, interrupted, stream_head
from torchfleet.cli.playbooks import finish, playbook, results
from torchfleet.cli.usage import ACTIVE_STATES, REFUSED, UsageError, check_run_id

LAUNCH = "torchfleet.cluster.torchrun_launch"


def script_path(script: str) -> str:
    # The playbook runs from this directory, but the path is also shown and used on the nodes.
    return str(Path(script).resolve()) if Path(script).exists() else script


def new_run_id() -> str:
    """The run's id, chosen here (as the module would) so that the command can follow the run it
    starts."""
    from torchfleet.collection import module_util

    return module_util("_on_node.launch_plan").new_run_id()


def launch_command(args: argparse.Namespace) -> int:
    from torchfleet.extra_vars import parse_extra_vars

    if not Path(args.script).is_file() and not shared_storage(args):
        raise UsageError(f"script {args.script} not found (give the training script's path)")
    # The run id is chosen here, so that a Ctrl-C at any moment knows which run to stop.
    run_id = str(parse_extra_vars(args.extra_vars).get("run_id") or new_run_id())
    check_run_id(run_id)
    return start_run(args, run_id, script=script_path(args.script), script_args=list(args.script_args),
                     # Attached to a Slurm job: follow it from its submission, printing Slurm's
                     # reason while it waits.
                     **({"detach_when": "submitted"} if args.scheduler == "slurm" and not args.detach else {}))


def restart_command(args: argparse.Namespace) -> int:
    check_run_id(args.run_id)
    return start_run(args, args.run_id, launch_action="restart")


def option_flags_given(args: argparse.Namespace, command: str | None = None) -> dict:
    """{short name: value} of the launch options given by their flags (parser.add_option_flags:
    `command`'s, else the command's own), as launch.yml takes them."""
    from torchfleet.cli.parser import option_flags

    return {option.short: getattr(args, option.name) for option, _help in option_flags(command or args.command)
            if getattr(args, option.name, None) is not None}


def start_run(args: argparse.Namespace, run_id: str, **launch_vars) -> int:
    """Run launch.yml for a run that starts (a launch, or a restart of a run that ended),
    detached on the head, then follow it here to its end unless --detach."""
    from torchfleet import run_stream
    from torchfleet.ansible_calls import CtrlC

    ctrl_c = CtrlC()
    outcome = playbook(args, "launch", ctrl_c=ctrl_c, run_id=run_id, detach=True,
                       **option_flags_given(args), **launch_vars)
    if ctrl_c.heard:  # the playbook never ran, or was ended; the head refuses to start what it had not
        return interrupted(args, run_id)
    started = [item["res"] for item in results(outcome, LAUNCH, failed=True)]
    result = started[-1] if started else {}
    if outcome.rc != 0 and not result.get("state"):
        # Refused before anything started: the checks' words, and a code of our own.
        if args.json:
            finish(args, outcome, {"run_id": run_id, "state": None, "result": result})
        else:
            finish(args, outcome, {})
        return REFUSED
    head_name = result.get("nodes", ["?"])[0]
    if result.get("state") in ACTIVE_STATES and args.detach:
        if args.json:
            print(json.dumps({"run_id": run_id, "state": result.get("state"), "head": head_name,
                              "log_dir": result.get("log_dir"), "world_size": result.get("world_size")}, indent=1))
        else:
            print(f"run {run_id} is running on {head_name}, detached (world size {result.get('world_size')})")
            print(f"follow it: torchfleet logs -f {run_id}; wait for its end: torchfleet wait {run_id}; "
                  f"stop it: torchfleet stop {run_id}")
        return 0
    if result.get("state") not in ACTIVE_STATES:  # it ended before every node's ranks ran: report it
        # Nothing to follow: the head by name alone, without loading Ansible's ssh plugin (docs/performance.md).
        told = told_by_playbook(outcome) or {}
        head = run_stream.Head(name=told.get("head") or head_name, user=told.get("user", ""),
                               log_dir=told.get("log_dir", ""), ssh=[])
        return follow_to_end(args, {"head": head, "hostvars": {}}, run_id, record=result)
    how = f"submitted as Slurm job {result['job_id']}" if result.get("job_id") else "started"
    try:  # a Ctrl-C from here on stops the run, as it does while the run is followed
        print(f"torchfleet: run {run_id} {how} on {head_name} (world size {result.get('world_size')}); "
              f"Ctrl-C stops it; closing this terminal or losing the connection does not "
              f"(torchfleet logs -f {run_id} follows it again)", file=sys.stderr, flush=True)
        ctrl_c.follow()
        target = launched_target(outcome, args)  # loads Ansible's ssh plugin, which costs time
    except KeyboardInterrupt:
        return interrupted(args, run_id)
    return follow_to_end(args, target, run_id, stop_on_interrupt=True)


def told_by_playbook(outcome) -> dict | None:
    """What the launch playbook told the command (set_stats torchfleet_run), if it did."""
    return outcome.progress.stats.get("artifact_data", {}).get("torchfleet_run")


def launched_target(outcome, args: argparse.Namespace) -> dict:
    """The head and how to reach it, as the launch playbook told (set_stats: the connection
    variables as Ansible resolved them), so the inventory need not be read again."""
    from torchfleet import node_values

    told = told_by_playbook(outcome)
    if not told or told.get("passwords_in_inventory"):  # never told: read them there
        return follow_target(args)
    try:  # the runs' directory is the head module's word (its run's log_dir), the rest the inventory's
        node_values.path(told.get("log_dir"), "the run's log_dir")
    except node_values.NodeValueError:
        return follow_target(args)
    hostvars = {key: value for key, value in told["connection"].items() if value not in (None, "")}
    return {"head": stream_head(args, told["head"], told["user"], told["log_dir"], hostvars), "hostvars": hostvars}


def shared_storage(args: argparse.Namespace) -> bool:
    from torchfleet.extra_vars import parse_extra_vars
    from torchfleet.dry_run import as_bool

    return as_bool(parse_extra_vars(args.extra_vars).get("shared_storage", False))
