# PYTHON_ARGCOMPLETE_OK
"""The `torchfleet` command."""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from torchfleet import __version__

# The states of a run still going, as the head's record says them (its record.ACTIVE).
ACTIVE_STATES = ("starting", "running", "restarting")


def _cluster(args: argparse.Namespace) -> int:
    from torchfleet import devcluster  # only this command needs it: the others start sooner

    try:
        name = devcluster.validate_name(args.name)
        inventory = Path(args.inventory) if args.inventory else None
        if args.action == "up":
            written = devcluster.up(name=name, nodes=args.nodes, inventory=inventory, slurm=args.slurm)
            if args.slurm:
                print(f"torchfleet: the nodes have Slurm's packages; set Slurm up with: ansible-playbook "
                      f"setup.yml -i {written} -e scheduler=slurm", file=sys.stderr)
        elif args.action == "down":
            devcluster.down(name=name, inventory=inventory)
        elif args.action == "image":
            devcluster.ensure_engine()
            build = devcluster.ensure_slurm_image if args.slurm else devcluster.ensure_image
            print(build(rebuild=args.rebuild))
        elif args.action == "status":
            rows = devcluster.status(name)
            if args.json:
                print(json.dumps(rows))
            else:
                for row in rows:
                    print(f"{row['name']:<24} {'running' if row['running'] else 'stopped':<8} {row['address']}")
    except devcluster.ClusterError as error:
        print(f"torchfleet: error: {error}", file=sys.stderr)
        return 1
    return 0


class UsageError(Exception):
    """Bad arguments found after parsing; exit 2 like argparse."""


_RUN_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _unsafe(value) -> str:
    """YAML for -e that Ansible never templates: arguments arrive byte for byte.

    Only strings with a Jinja delimiter get `!unsafe`: Ansible's constructor for that tag
    resolves the scalar's type ("true" would become a bool, "" None); a JSON string is a str."""
    if isinstance(value, list):
        return "[" + ", ".join(_unsafe(item) for item in value) + "]"
    text = json.dumps(value, ensure_ascii=False)
    if isinstance(value, str) and any(mark in value for mark in ("{{", "{%", "{#")):
        return "!unsafe " + text
    return text


def _ansible_args(args: argparse.Namespace) -> list[str]:
    """The connection and Vault options, to ansible-playbook as the user gave them."""
    cmdline = []
    for option, value in (("--user", args.user), ("--private-key", args.private_key),
                          ("--forks", args.forks)):
        if value is not None:
            cmdline += [option, str(value)]
    for path in args.vault_password_file:
        cmdline += ["--vault-password-file", path]
    # Asked once here (ansible-runner answers Ansible's own prompts with them: `passwords`).
    cmdline += ["--ask-vault-pass"] * args.ask_vault_pass + ["--ask-become-pass"] * args.ask_become_pass
    return cmdline


def _passwords(args: argparse.Namespace) -> dict:
    """ansible-runner's answers to Ansible's password prompts: {prompt pattern: password}."""
    answers = {}
    if getattr(args, "become_password", None) is not None:
        answers[r"BECOME password.*:\s*?$"] = args.become_password
    if getattr(args, "vault_password", None) is not None:
        answers[r"Vault password.*:\s*?$"] = args.vault_password
    return answers


def _playbook_args(args: argparse.Namespace, **fixed) -> list[str]:
    cmdline = _ansible_args(args)
    for value in args.extra_vars:
        # Ansible would fail on it while reading the inventory, in words about the inventory.
        if value.startswith("@") and not Path(value[1:]).expanduser().is_file():
            raise UsageError(f"-e {value}: no such file; give the path of a YAML or JSON file of "
                             f"variables after the @")
        cmdline += ["-e", value]
    if fixed:
        body = ", ".join(f"{json.dumps(key)}: {_unsafe(value)}" for key, value in fixed.items())
        cmdline += ["-e", "{" + body + "}"]
    if args.limit:
        cmdline += ["--limit", args.limit]
    if args.verbose > 1:
        cmdline.append("-" + "v" * (args.verbose - 1))
    return cmdline


def _progress(args: argparse.Namespace):
    from torchfleet.run import Progress

    return Progress(stream=sys.stderr, live=sys.stderr.isatty() and not args.verbose,
                    verbose=args.verbose)


def _results(outcome, action: str, failed: bool = False) -> list[dict]:
    """The results of one module's tasks, found by the module Ansible resolved, not task titles."""
    found = outcome.progress.results + (outcome.progress.failed_results if failed else [])
    return [item for item in found if item.get("action") == action]


def _playbook(args: argparse.Namespace, name: str, ctrl_c=None, **fixed):
    from torchfleet.inventory import inventory_paths
    from torchfleet.run import run

    with tempfile.TemporaryDirectory(prefix="torchfleet-inv-") as scratch:
        inventories = inventory_paths(args.inventory, Path(scratch))
        return run(playbook=f"torchfleet.cluster.{name}", inventories=inventories,
                   cmdline=_playbook_args(args, **fixed), progress=_progress(args), ctrl_c=ctrl_c,
                   passwords=_passwords(args))


def _finish(args: argparse.Namespace, outcome, payload: dict) -> int:
    from torchfleet.run import print_failures

    if args.json:
        payload = dict(payload, rc=outcome.rc, status=outcome.status,
                       failures=outcome.progress.failures,
                       artifacts=str(outcome.artifacts) if outcome.artifacts else None)
        print(json.dumps(payload, indent=1))
    if outcome.rc != 0:
        print_failures(outcome)
    return outcome.rc


def _setup(args: argparse.Namespace) -> int:
    outcome = _playbook(args, "setup")
    stats = outcome.progress.stats
    if not args.json:
        for host, state in outcome.progress.hosts.items():
            print(f"{host:<24} {state.done} tasks, {state.changed} changed, {state.failed} failed")
    return _finish(args, outcome, {"hosts": {h: vars(s) for h, s in outcome.progress.hosts.items()},
                                   "changed": stats.get("changed", {})})


def _script_path(script: str) -> str:
    # The playbook runs from this directory, but the path is also shown and used on the nodes.
    return str(Path(script).resolve()) if Path(script).exists() else script


LAUNCH = "torchfleet.cluster.torchrun_launch"
# A launch that did not start (refused by a check, the inventory, an unreachable node) exits with
# this, as `docker run` does for its own errors: a run's own codes are 0 to 255 otherwise.
REFUSED = 125
INTERRUPTED = 130
JSON_REPORT_LINES = 1000  # the last lines of a run that --json reports carry
# What each command's --help says of its exit codes.
RUN_EXITS = ("exit: the run's own code: 0, the first failing rank's (128+N for signal N), else the "
             "launcher's; 1 a run lost with its supervisor; 125 the launch was refused before anything "
             "started; 130 Ctrl-C; 255 the stream from the head was lost (the run goes on); 2 bad usage")
ANSIBLE_EXITS = "exit: 0 done, 2 bad usage, else ansible-playbook's code (the failures are printed)"


def _new_run_id() -> str:
    import secrets
    from datetime import datetime, timezone

    from torchfleet.collection import module_util

    return module_util("_launch_plan").new_run_id(datetime.now(timezone.utc), secrets.token_hex(3))


def _launch(args: argparse.Namespace) -> int:
    from torchfleet.extra_vars import parse_extra_vars

    if not Path(args.script).is_file() and not _shared(args):
        raise UsageError(f"script {args.script} not found (give the training script's path)")
    # The run id is chosen here, so that a Ctrl-C at any moment knows which run to stop.
    run_id = str(parse_extra_vars(args.extra_vars).get("run_id") or _new_run_id())
    _check_run_id(run_id)
    return _start(args, run_id, script=_script_path(args.script), script_args=list(args.script_args),
                  **({"scheduler": args.scheduler} if args.scheduler else {}),
                  # Attached to a Slurm job: follow it from its submission, printing Slurm's
                  # reason while it waits.
                  **({"detach_when": "submitted"} if args.scheduler == "slurm" and not args.detach else {}))


def _restart(args: argparse.Namespace) -> int:
    _check_run_id(args.run_id)
    return _start(args, args.run_id, launch_action="restart")


def _start(args: argparse.Namespace, run_id: str, **launch_vars) -> int:
    """Run launch.yml for a run that starts (a launch, or a restart of a run that ended),
    detached on the head, then follow it here to its end unless --detach."""
    from torchfleet import follow
    from torchfleet.run import CtrlC

    ctrl_c = CtrlC()
    try:
        outcome = _playbook(args, "launch", ctrl_c=ctrl_c, run_id=run_id, detach=True,
                            **{key: value for key, value in (("max_restarts", args.max_restarts),
                                                             ("min_nodes", args.min_nodes),
                                                             ("spare_nodes", getattr(args, "spare_nodes", None)),
                                                             ("share_nodes", getattr(args, "share_nodes", None) or None))
                               if value is not None},
                            **launch_vars)
        if ctrl_c.heard:  # the playbook was ended; the head refuses to start what it had not
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        return _interrupted(args, run_id)
    started = [item["res"] for item in _results(outcome, LAUNCH, failed=True)]
    result = started[-1] if started else {}
    if outcome.rc != 0 and not result.get("state"):
        # Refused before anything started: the checks' words, and a code of our own.
        if args.json:
            _finish(args, outcome, {"run_id": run_id, "state": None, "result": result})
        else:
            _finish(args, outcome, {})
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
        told = _told(outcome) or {}
        head = follow.Head(name=told.get("head") or head_name, user=told.get("user", ""),
                           log_dir=told.get("log_dir", ""), ssh=[])
        return _follow_to_end(args, {"head": head, "hostvars": {}}, run_id, record=result)
    how = f"submitted as Slurm job {result['job_id']}" if result.get("job_id") else "started"
    try:  # a Ctrl-C from here on stops the run, as it does while the run is followed
        print(f"torchfleet: run {run_id} {how} on {head_name} (world size {result.get('world_size')}); "
              f"Ctrl-C stops it; closing this terminal or losing the connection does not "
              f"(torchfleet logs -f {run_id} follows it again)", file=sys.stderr, flush=True)
        target = _launched_target(outcome, args)  # loads Ansible's ssh plugin, which costs time
    except KeyboardInterrupt:
        return _interrupted(args, run_id)
    return _follow_to_end(args, target, run_id, stop_on_interrupt=True)


def _told(outcome) -> dict | None:
    """What the launch playbook told the command (set_stats torchfleet_run), if it did."""
    return outcome.progress.stats.get("artifact_data", {}).get("torchfleet_run")


def _launched_target(outcome, args: argparse.Namespace) -> dict:
    """The head and how to reach it, as the launch playbook told (set_stats: the connection
    variables as Ansible resolved them), so the inventory need not be read again."""
    told = _told(outcome)
    if not told or told.get("passwords_in_inventory"):  # never told: read them there
        return _follow_target(args)
    hostvars = {key: value for key, value in told["connection"].items() if value not in (None, "")}
    return {"head": _head(args, told["head"], told["user"], told["log_dir"], hostvars), "hostvars": hostvars}


def _head(args: argparse.Namespace, name: str, user: str, log_dir: str, hostvars: dict):
    """The head as the stream reaches it: Ansible's ssh for it, with -u, --private-key and -K."""
    from torchfleet import follow

    try:
        ssh, login = follow.ssh_login(name, hostvars, getattr(args, "user", None),
                                      getattr(args, "private_key", None))
    except follow.FollowError as error:
        raise UsageError(str(error)) from None
    return follow.Head(name=name, user=user, log_dir=log_dir, ssh=ssh, login=login,
                       become_password=follow.become_password(hostvars, getattr(args, "become_password", None)))


def _follow_target(args: argparse.Namespace) -> dict:
    """The head and the ssh that reaches it, from the inventory (see inventory.cluster_vars)."""
    from torchfleet.inventory import cluster_vars

    found = cluster_vars(args.inventory, args.extra_vars)
    return {"head": _head(args, found["head"], found["user"], found["log_dir"], found["hostvars"]),
            "hostvars": found["hostvars"]}


def _shown_ranks(args: argparse.Namespace) -> str:
    """Which output a command shows, as the head's follower takes it."""
    if getattr(args, "rank", None) is not None:
        return f"rank:{args.rank}"
    if getattr(args, "node", None):
        return f"node:{args.node}"
    return "all" if getattr(args, "all_ranks", False) else "0"


def _follow_to_end(args, found, run_id, record=None, ranks=None, from_start=True,
                   stop_on_interrupt=False) -> int:
    """Stream the run (rank 0, or every rank) until it ends, then its end report; the run's
    own exit code. `record`: the run had ended already, print its report only."""
    from torchfleet import follow, screen

    head = found["head"]
    ranks = ranks or _shown_ranks(args)
    shown = collections.deque(maxlen=JSON_REPORT_LINES)  # memory bounded whatever the run writes
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
            record = follow.follow(head, found["hostvars"], run_id, ranks, from_start, on_line,
                                   tail=getattr(args, "tail", None), on_piece=live and live.piece)
        elif ranks == "0":  # it ended before it could be followed: rank 0's last lines instead
            for line in record.get("rank0_tail") or []:
                on_line(line)
    except KeyboardInterrupt:
        if live:  # the bars left as they read, before any word of torchfleet's below them
            live.close()
        if stop_on_interrupt:
            return _interrupted(args, run_id)
        print(f"torchfleet: stopped following; run {run_id or '(newest)'} goes on", file=sys.stderr)
        return INTERRUPTED
    except follow.FollowError as error:
        print(f"torchfleet: {error}; the run goes on: torchfleet logs -f {run_id or ''}".rstrip(),
              file=sys.stderr)
        return 255
    finally:
        if live:
            live.close()
    if record.get("state") == "unknown":
        print(f"torchfleet: {record.get('msg')}", file=sys.stderr)
        return 1
    out, err = follow.end_report(record, head.name)
    if args.json:
        from torchfleet.collection import module_util

        run_record = module_util("_head.record")
        keys = run_record.RunRecord.keys(run_record.REPORTED)
        print(json.dumps({"run_id": record.get("run_id"), "rc": follow.exit_code(record),
                          "report": (list(shown) or record.get("rank0_tail") or []) + out,
                          "result": {key: record.get(key) for key in keys}, "artifacts": None}, indent=1))
    else:
        follow.print_lines(out)
    follow.print_lines(err, sys.stderr)
    return follow.exit_code(record)


def _interrupted(args: argparse.Namespace, run_id: str) -> int:
    """Ctrl-C in an attached launch: stop the run everywhere, as mpirun and torchrun do."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the stop short
    print(f"torchfleet: interrupted: stopping run {run_id} on every node", file=sys.stderr, flush=True)
    outcome = _playbook(args, "launch", launch_action="stop", run_id=run_id)
    if outcome.rc == 0:
        print(f"torchfleet: run {run_id} stopped", file=sys.stderr)
    else:
        from torchfleet.run import print_failures
        print_failures(outcome)
        print(f"torchfleet: run {run_id} may still run: torchfleet stop {run_id}", file=sys.stderr)
    return INTERRUPTED


def _check_run_id(run_id: str) -> None:
    if not _RUN_ID.fullmatch(run_id):
        raise UsageError(f"run id {run_id!r} is not valid (letters, digits, '_', '.', '-')")


def _shared(args: argparse.Namespace) -> bool:
    from torchfleet.extra_vars import parse_extra_vars
    from torchfleet.plan import as_bool

    return as_bool(parse_extra_vars(args.extra_vars).get("shared_storage", False))


def _alive(args: argparse.Namespace):
    """(the ansible-runner outcome, {node: [run ids alive there]}), asked of every node as the
    training account (in a container root may not read other users' /proc/PID/environ)."""
    from torchfleet.inventory import cluster_vars

    found = cluster_vars(args.inventory, args.extra_vars)
    outcome = _adhoc(args, "torchfleet.cluster.torchrun_launch", "state=stopped", found["group"],
                     ["--check", "--become", "--become-user", found["user"]])
    return outcome, {item["host"]: [run["run_id"] for run in item["res"].get("runs", [])]
                     for item in outcome.progress.results}


def _stop(args: argparse.Namespace) -> int:
    fixed = {"launch_action": "stop"}
    if args.run_id and args.all:
        raise UsageError("give a run id or --all, not both")
    if args.run_id:
        _check_run_id(args.run_id)
        fixed["run_id"] = args.run_id
    elif not args.all:
        # As scancel and sky cancel: a bare stop ends the one run alive, never several at once.
        outcome, alive = _alive(args)
        if outcome.rc != 0:
            return _finish(args, outcome, {})
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
    outcome = _playbook(args, "launch", **fixed)
    said = [item["res"].get("msg", "") for item in outcome.progress.results
            if item.get("action") == "ansible.builtin.debug"]
    if not args.json:
        for line in said:
            print(line)
    return _finish(args, outcome, {"stopped": said})


def _wait(args: argparse.Namespace) -> int:
    if args.run_id:
        _check_run_id(args.run_id)
    return _follow_to_end(args, _follow_target(args), args.run_id, ranks="none")


def _logs(args: argparse.Namespace) -> int:
    """The run's output (rank 0's, or every rank's), its end report if it has ended; with -f
    it follows the run until it ends and exits with its code."""
    from torchfleet import follow

    if args.run_id:
        _check_run_id(args.run_id)
    if (args.rank is not None and args.rank < 0) or (args.tail is not None and args.tail < 1):
        raise UsageError("--rank takes a rank (0 or more), --tail a number of lines (1 or more)")
    found = _follow_target(args)
    if args.follow:
        return _follow_to_end(args, found, args.run_id, from_start=not args.since_now)
    head = found["head"]
    # The header names the state, known at the end: the lines wait in a file past a few MiB.
    with tempfile.SpooledTemporaryFile(max_size=8 << 20, mode="w+", encoding="utf-8") as lines:
        try:
            record = follow.follow(head, found["hostvars"], args.run_id, _shown_ranks(args),
                                   on_line=lambda text: lines.write(text + "\n"), until_end=False,
                                   tail=args.tail)
        except follow.FollowError as error:
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
        out, err = follow.end_report(record, head.name)
        follow.print_lines(out + err, sys.stderr)
    return 0


def _read_runs(args: argparse.Namespace, run_id: str | None = None):
    """(the outcome, the cluster variables with `head_now`, the head's clock then, the records
    newest first; only `run_id`'s if given) from the head (torchrun_run_info)."""
    from torchfleet.inventory import cluster_vars

    found = cluster_vars(args.inventory, args.extra_vars)
    module_args = {"log_dir": found["log_dir"], **({"run_id": run_id} if run_id else {})}
    outcome = _adhoc(args, "torchfleet.cluster.torchrun_run_info", json.dumps(module_args),
                     found["head"], ["--become", "--become-user", found["user"]])
    answer = next((item["res"] for item in outcome.progress.results), {})
    return outcome, dict(found, head_now=answer.get("now"), others=answer.get("others", []),
                         jobs=answer.get("jobs", [])), answer.get("runs", [])


def _listed(run: dict) -> dict:
    from torchfleet.collection import module_util

    run_record = module_util("_head.record")
    return {key: run.get(key) for key in run_record.RunRecord.keys(run_record.LISTED)}


def _runs(args: argparse.Namespace) -> int:
    """The cluster's runs, newest first, from their records on the head (torchrun_run_info)."""
    if args.limit:
        raise UsageError("runs reads the records on the head alone: --limit does not apply")
    if (args.keep is not None or args.older_than is not None) and not args.prune:
        raise UsageError("--keep and --older-than choose what --prune removes: add --prune")
    if args.prune and args.keep is None and args.older_than is None:
        raise UsageError("--prune needs --keep N (the newest runs to keep) or --older-than DAYS, or both")
    if (args.keep is not None and args.keep < 0) or (args.older_than is not None and args.older_than < 0):
        raise UsageError("--keep and --older-than take a number of at least 0")
    if args.count is not None and args.count < 1:
        raise UsageError("-n takes a number of at least 1")
    outcome, found, runs = _read_runs(args)
    if outcome.rc != 0:
        return _finish(args, outcome, {})
    if args.prune:
        return _prune(args, found, runs)
    listed = [_listed(run) for run in runs]
    if args.all_users:
        listed = _every_accounts(listed, found)
    runs = [run for run in listed if args.state is None or run.get("state") == args.state][:args.count]
    if args.json:
        print(json.dumps(runs, indent=1))
        return 0
    owner = f"{'ACCOUNT':<14} " if args.all_users else ""
    print(f"{'RUN':<28} {owner}{'STATE':<10} {'RC':>4} {'STARTED (HEAD, UTC)':<26} {'DURATION':>9} {'WORLD':>5} "
          f"{'RESTARTS':>8}  FAILED [JOB]")
    for run in runs:
        failed = (f"rank {run['failed_rank']} on {run['failed_host']}" if run.get("failed_rank") is not None
                  else run.get("failed_host") or "")
        if run.get("job_id"):  # a Slurm job: its id, and while it lasts its state and reason
            job = f"slurm job {run['job_id']}"
            if run.get("state") in ACTIVE_STATES or run.get("state") == str(run.get("job_state")).lower():
                reason = run.get("job_reason")
                job += f" {run.get('job_state')}" + (f" ({reason})" if reason and reason != "None" else "")
            failed = f"{failed}  [{job}]".strip()
        duration = f"{run['duration']:.1f}s" if isinstance(run.get("duration"), (int, float)) else "-"
        rc = "-" if run.get("rc") is None else str(run["rc"])
        owner = f"{run['account']:<14} " if args.all_users else ""
        print(f"{run['run_id']:<28} {owner}{run['state']:<10} {rc:>4} {run.get('started') or '-':<26} "
              f"{duration:>9} {run.get('world_size') or '-':>5} {run.get('restarts') or 0:>8}  {failed}")
    return 0


def _every_accounts(listed: list, found: dict) -> list:
    """This account's runs (`listed`), the other accounts' runs alive on the head (its run board)
    and the other accounts' Slurm jobs (squeue, torchfleet's or not), each with its account,
    newest first."""
    seen = {run["run_id"] for run in listed} | {entry["run_id"] for entry in found["others"]}
    every = [dict(run, account=found["user"]) for run in listed] + [
        {"run_id": entry["run_id"], "account": entry["account"], "state": entry["state"],
         "started": entry.get("started"), "world_size": entry.get("world_size")} for entry in found["others"]]
    every += [{"run_id": job["name"], "account": job["user"], "state": job["state"].lower(), "started": job["submitted"],
               "job_id": job["job_id"], "job_state": job["state"], "scheduler": "slurm"}
              for job in found["jobs"] if job["user"] != found["user"] and job["name"] not in seen]
    for run in every:  # a run of another account that Slurm holds: its job's id and state
        job = next((job for job in found["jobs"] if job["name"] == run["run_id"] and job["user"] == run["account"]), None)
        if job and not run.get("job_id"):
            run.update(job_id=job["job_id"], job_state=job["state"])
    return sorted(every, key=lambda run: run.get("started") or "", reverse=True)


def _run_status(args: argparse.Namespace) -> int:
    """One run's record, as `runs` lists it: key: value lines, or JSON."""
    outcome, _found, runs = _read_runs(args, args.run_id)
    if outcome.rc != 0:
        return _finish(args, outcome, {})
    if not runs:
        print(f"torchfleet status: no run {args.run_id} on the head (torchfleet runs lists them)",
              file=sys.stderr)
        return 1
    record = _listed(runs[0])
    if args.json:
        print(json.dumps(record, indent=1))
    else:
        for key, value in record.items():
            if value not in (None, [], {}, ""):
                print(f"{key + ':':<18} {value if not isinstance(value, (list, dict)) else json.dumps(value)}")
    return 0


def _prune(args: argparse.Namespace, found: dict, runs: list) -> int:
    """Remove the chosen ended runs' directories on every node of the cluster."""
    from torchfleet.collection import module_util

    # Ages on the head's clock, as the records' start times are: never the controller's.
    chosen = module_util("_run_prune").prunable(runs, args.keep, args.older_than, now=found["head_now"])
    if not chosen:
        print("torchfleet: no ended run to prune", file=sys.stderr)
        if args.json:
            print(json.dumps({"pruned": [], "kept": {}, "rc": 0}, indent=1))
        return 0
    outcome = _adhoc(args, "torchfleet.cluster.torchrun_prune",
                     json.dumps({"log_dir": found["log_dir"], "run_ids": chosen,
                                 "run_dirs": {run["run_id"]: run["log_dir"] for run in runs
                                              if run["run_id"] in chosen and run.get("log_dir")}}), found["group"],
                     ["--become", "--become-user", found["user"]])
    kept = {item["host"]: item["res"].get("kept", {}) for item in outcome.progress.results
            if item["res"].get("kept")}
    pruned = [run_id for run_id in chosen if not any(run_id in why for why in kept.values())]
    if not args.json:
        print(f"torchfleet: pruned {len(pruned)} run(s){': ' + ', '.join(pruned) if pruned else ''}")
        for host, why in sorted(kept.items()):
            for run_id, reason in why.items():
                print(f"torchfleet: kept {run_id} on {host}: {reason}", file=sys.stderr)
    return _finish(args, outcome, {"pruned": pruned, "kept": kept})


def _adhoc(args: argparse.Namespace, module: str, module_args: str, pattern: str, extra: list[str]):
    from torchfleet.inventory import inventory_paths
    from torchfleet.run import run

    with tempfile.TemporaryDirectory(prefix="torchfleet-inv-") as scratch:
        inventories = inventory_paths(args.inventory, Path(scratch))
        cmdline = _ansible_args(args) + list(extra) + (["--limit", args.limit] if args.limit else [])
        return run(module=module, module_args=module_args, host_pattern=pattern,
                   inventories=inventories, cmdline=cmdline, progress=_progress(args),
                   passwords=_passwords(args))


def _status(args: argparse.Namespace) -> int:
    if args.run_id:
        _check_run_id(args.run_id)
        return _run_status(args)
    outcome, alive = _alive(args)
    # Other accounts' runs on each node, from its run board: shown, never this account's to stop.
    others = {item["host"]: item["res"].get("others", []) for item in outcome.progress.results}
    # Slurm's queue, the same from every node: every account's jobs.
    queue = next((item["res"]["queue"] for item in outcome.progress.results if item["res"].get("queue")), [])
    if not args.json:
        for host in sorted(alive):
            said = alive[host] + [f"{entry['run_id']} (account {entry['account']}, {entry['state']})"
                                  for entry in others.get(host, [])]
            print(f"{host:<24} {', '.join(said) if said else 'idle'}")
        for job in queue:
            print(f"slurm job {job['job_id']:<6} {job['state']:<10} account {job['user']:<14} {job['name']}")
    return _finish(args, outcome, {"runs": alive, "others": others, "jobs": queue})


def _render(args: argparse.Namespace) -> int:
    from torchfleet import plan as tfplan
    from torchfleet.collection import module_util
    from torchfleet.extra_vars import parse_extra_vars
    from torchfleet.inventory import cluster_group, inventory_paths, read_inventory
    from torchfleet.run import ansible_env, fact_cache_dir

    extra = parse_extra_vars(args.extra_vars)
    batch = args.format in ("pbs", "slurm")
    with tempfile.TemporaryDirectory(prefix="torchfleet-inv-") as scratch:
        if batch and not args.inventory and not Path("inventory").is_dir():
            hosts, hostvars = [], {}
        else:
            inventories = inventory_paths(args.inventory, Path(scratch))
            hosts, hostvars = read_inventory(inventories, dict(os.environ, **ansible_env()),
                                             limit=args.limit, group=cluster_group(extra))
    if batch:
        if not args.nodes or args.nodes < 1:
            raise UsageError(f"--format {args.format} needs --nodes N (the allocation's node count)")
    plan, source = tfplan.build(args.script, list(args.script_args), extra, hosts, hostvars,
                                fact_cache_dir(), batch_nodes=args.nodes if batch else None,
                                batch_slots=args.gpus_per_node, batch_format=args.format)
    rendered = tfplan.render(plan)
    if batch:
        whole = tfplan.as_bool(extra.get("batch_whole_nodes", True))
        try:
            script = module_util("_batch_script").batch_script(
                args.format, plan, rendered, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                walltime=args.walltime, queue=args.queue, account=args.account, whole_nodes=whole,
                extra_args=extra.get(f"{args.format}_extra_args") or [])
        except ValueError as error:
            raise UsageError(str(error)) from error
        sys.stdout.write(script)
        return 0
    origin = ("the cached facts of setup" if source == "facts" else "the inventory alone (no facts cached: run "
              "`torchfleet setup` for the real addresses, interfaces and paths)")
    print(f"torchfleet: rendered from {origin}",
          file=sys.stderr)
    if args.json:
        print(json.dumps(tfplan.as_json(plan, rendered, source), indent=1))
    else:
        sys.stdout.write(tfplan.as_text(plan, rendered, source))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchfleet",
        description="Turn a handful of machines into a multi-node PyTorch cluster and launch on it.",
    )
    parser.add_argument("--version", action="version", version=f"torchfleet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    cluster = sub.add_parser("cluster", help="a local cluster of containers for trying and testing")
    cluster.add_argument("action", choices=["up", "down", "image", "status"],
                         help="up: start (or keep) the nodes; down: remove them; image: build the node "
                              "image only; status: list the nodes")
    cluster.add_argument("--nodes", type=int, default=3, help="number of nodes for `up` (default 3)")
    cluster.add_argument("--name", default="local",
                         help="cluster name; containers are tf-NAME-nodeN (default: local)")
    cluster.add_argument("--inventory", help="where `up` writes the inventory (default: inventory/NAME.yml)")
    cluster.add_argument("--slurm", action="store_true",
                         help="with `up` and `image`: nodes with Slurm's packages (munge, slurmd, slurmctld), "
                              "which setup.yml -e scheduler=slurm then sets up")
    cluster.add_argument("--rebuild", action="store_true", help="with `image`: build even if cached")
    cluster.add_argument("--json", action="store_true", help="with `status`: print JSON")
    cluster.set_defaults(func=_cluster)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-i", "--inventory", action="append", default=[],
                        help="inventory path or MPI/PBS/Slurm hostfile (repeatable; default: ./inventory)")
    common.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                        help="KEY=VALUE, JSON or @FILE, as ansible-playbook (repeatable)")
    common.add_argument("--limit", help="only these hosts (an Ansible pattern)")
    ansible = common.add_argument_group("as ansible-playbook takes them")
    ansible.add_argument("-u", "--user", help="connect as this user")
    ansible.add_argument("--private-key", metavar="FILE", help="the ssh key to connect with")
    ansible.add_argument("--forks", type=int, metavar="N", help="nodes Ansible works on at once")
    ansible.add_argument("-K", "--ask-become-pass", action="store_true", help="ask for the become (sudo) password")
    ansible.add_argument("--vault-password-file", action="append", default=[], metavar="FILE",
                         help="decrypt vaulted -e @FILE and variables with this (repeatable)")
    ansible.add_argument("-J", "--ask-vault-pass", action="store_true", help="ask for the Vault password")
    common.add_argument("--json", action="store_true", help="print the result as JSON")
    common.add_argument("-v", "--verbose", action="count", default=0,
                        help="print Ansible's own output (-vv and more: Ansible's verbosity)")

    sub.add_parser("setup", parents=[common], help="prepare every node (playbook setup.yml)",
                   description="Run torchfleet.cluster.setup on the inventory.",
                   epilog=ANSIBLE_EXITS).set_defaults(func=_setup)
    for name, func, text, exits in (
            ("launch", _launch, "start a training run and follow it to its end", RUN_EXITS),
            ("render", _render, "print the launch command, hostfile and env; runs nothing",
             "exit: 0 rendered, 1 the request cannot be rendered (the message says why), 2 bad usage")):
        p = sub.add_parser(name, parents=[common], help=text, epilog=exits,
                           usage=f"torchfleet {name} [options] SCRIPT [-- ARGS...]")
        p.add_argument("script", metavar="SCRIPT", help="the training script")
        p.set_defaults(func=func, script_args=[])
        if name == "launch":
            p.add_argument("--detach", action="store_true",
                           help="return with the run id once every node's ranks have started")
            p.add_argument("--all-ranks", action="store_true",
                           help="stream every rank's output, each line as [rank N host] (default: rank 0's)")
            p.add_argument("--max-restarts", type=int, metavar="N",
                           help="restart the run up to N times after a node is lost or a rank fails, "
                                "on the nodes that answer; the script resumes from its checkpoint")
            p.add_argument("--min-nodes", type=int, metavar="M",
                           help="with --max-restarts: the fewest nodes an attempt may use (default: all)")
            p.add_argument("--spare-nodes", type=int, metavar="N",
                           help="with --max-restarts: keep the group's last N nodes out of the world, "
                                "ready to replace a lost node so the world size does not change")
            p.add_argument("--share-nodes", action="store_true",
                           help="launch even where another account's torchfleet run is alive on the "
                                "nodes (refused by default, naming that run)")
            p.add_argument("--scheduler", choices=["none", "slurm"],
                           help="slurm: submit the run as a Slurm batch job with sbatch on the head "
                                "(-e slurm_partition=, slurm_account=, slurm_time_limit=); default: "
                                "mpirun over ssh")
        if name == "render":
            p.add_argument("--format", choices=["text", "json", "pbs", "slurm"], default="text",
                           help="pbs/slurm: a batch script that launches from inside an allocation")
            p.add_argument("--nodes", type=int, help="pbs/slurm: number of nodes")
            p.add_argument("--gpus-per-node", type=int, help="pbs/slurm: GPUs (workers) per node")
            p.add_argument("--walltime", help="pbs/slurm: time limit, HH:MM:SS")
            p.add_argument("--queue", "--partition", dest="queue", help="pbs queue / slurm partition")
            p.add_argument("--account", help="pbs/slurm: account to charge")
    restart = sub.add_parser("restart", parents=[common], epilog=RUN_EXITS,
                             help="start a run that failed, was lost or stopped again, from its own "
                                  "request, as its next attempt, and follow it to its end",
                             description="The run's script resumes from its checkpoint "
                                         "(TORCHFLEET_RESTART_COUNT tells it the attempt). Its secrets "
                                         "are never stored: give them again (-e env_secrets=...).")
    restart.add_argument("run_id", metavar="RUN_ID", help="the run (torchfleet runs lists them)")
    restart.add_argument("--detach", action="store_true",
                         help="return once every node's ranks have started")
    restart.add_argument("--all-ranks", action="store_true", help="stream every rank's output")
    restart.add_argument("--max-restarts", type=int, metavar="N",
                         help="from now on, restart it up to N times by itself (default: as launched)")
    restart.add_argument("--min-nodes", type=int, metavar="M",
                         help="the fewest nodes the attempt may use (default: as launched)")
    restart.set_defaults(func=_restart)
    stop = sub.add_parser("stop", parents=[common], help="stop a run on every node (RUN_ID, or --all)",
                          epilog="exit: 0 stopped (or nothing alive), 2 a bare stop with several runs alive "
                                 "(none stopped) or bad usage, else Ansible's code")
    stop.add_argument("run_id", nargs="?", help="the run; left out: the one run alive, if only one is")
    stop.add_argument("--all", action="store_true", help="every run of torchfleet")
    stop.set_defaults(func=_stop)
    for choice in sub.choices.values():
        choice.formatter_class = argparse.RawDescriptionHelpFormatter
    status = sub.add_parser("status", parents=[common],
                            help="which runs are alive on which node; with RUN_ID, that run's record",
                            epilog="exit: 0, 1 no such run, 2 bad usage, else Ansible's code")
    status.add_argument("run_id", nargs="?", help="the run whose record to show")
    status.set_defaults(func=_status)
    logs = sub.add_parser("logs", parents=[common], help="a run's output (rank 0's by default)",
                          epilog="exit: 0 (with -f: " + RUN_EXITS[6:] + "), 1 no log of the run, 2 bad usage")
    logs.add_argument("run_id", nargs="?", help="the run (default: the newest)")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="follow the run until it ends, and exit with its exit code")
    logs.add_argument("--since-now", action="store_true", help="with -f: only what is written from now on")
    which = logs.add_mutually_exclusive_group()
    which.add_argument("--all-ranks", action="store_true", help="every rank's output, as [rank N host] lines")
    which.add_argument("--rank", type=int, metavar="N", help="rank N's output alone")
    which.add_argument("--node", metavar="HOST", help="the output of the ranks on HOST, as [rank N host] lines")
    logs.add_argument("--tail", type=int, metavar="N", help="only the last N lines (then, with -f, what follows)")
    logs.set_defaults(func=_logs)
    wait = sub.add_parser("wait", parents=[common], epilog=RUN_EXITS,
                          help="wait for a run to end, print its end report, exit with its exit code")
    wait.add_argument("run_id", nargs="?", help="the run (default: the newest)")
    wait.set_defaults(func=_wait)
    runs = sub.add_parser("runs", parents=[common], help="the cluster's runs, newest first, with their "
                          "state and exit code; --prune removes old ones", epilog=ANSIBLE_EXITS)
    runs.add_argument("--prune", action="store_true",
                      help="remove ended runs' directories on every node (with --keep, --older-than)")
    runs.add_argument("--keep", type=int, metavar="N", help="with --prune: keep the N newest runs")
    runs.add_argument("--older-than", type=float, metavar="DAYS",
                      help="with --prune: only runs started more than DAYS days ago")
    runs.add_argument("--state", choices=[*ACTIVE_STATES, "succeeded", "failed", "stopped", "timed_out", "lost"],
                      help="only runs in this state")
    runs.add_argument("-n", dest="count", type=int, metavar="N", help="only the N newest (after --state)")
    runs.add_argument("--all-users", action="store_true",
                      help="also other accounts' runs alive on the head (its run board), with each run's account")
    runs.set_defaults(func=_runs)
    # Its own options (torchfleet doctor --help): main() hands the rest of the line to it.
    sub.add_parser("doctor", add_help=False, help="check the cluster before a run: ssh mesh, versions, "
                   "GPUs, network, port, leftovers (exit 0 well, 1 a check failed, 2 could not run)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["doctor"]:
        from torchfleet import doctor
        return doctor.main(argv[1:])
    # Everything after the first `--` goes to the training script, byte for byte.
    script_args = None
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    try:  # shell completion, where the optional extra is installed (torchfleet[completion])
        import argcomplete  # pylint: disable=import-outside-toplevel
    except ImportError:
        pass
    else:
        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    if script_args is not None:
        if args.func not in (_launch, _render):
            parser.error(f"`{args.command}` takes no script arguments after --")
        args.script_args = script_args
    if getattr(args, "format", None) == "json":
        args.json = True
    try:
        _ask_passwords(args)
        return args.func(args)
    except UsageError as error:
        parser.exit(2, f"torchfleet {args.command}: error: {error}\n")
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # noqa: BLE001 - a user-facing message, not a traceback
        from torchfleet.extra_vars import RenderError
        from torchfleet.inventory import InventoryError

        if isinstance(error, InventoryError):  # the -i given: a usage error, as argparse's
            parser.exit(2, f"torchfleet {args.command}: error: {error}\n")
        hostfile_error = _hostfile_error()
        if isinstance(error, RenderError) or (hostfile_error and isinstance(error, hostfile_error)):
            print(f"torchfleet {args.command}: error: {error}", file=sys.stderr)
            return 1
        raise


def _ask_passwords(args: argparse.Namespace) -> None:
    """-K and --ask-vault-pass: asked once, before anything runs, as ansible-playbook asks; the
    Vault's also decrypts the -e files this command reads itself."""
    import getpass

    from torchfleet.extra_vars import use_vault

    if getattr(args, "ask_become_pass", False):
        args.become_password = getpass.getpass("BECOME password: ")
    if getattr(args, "ask_vault_pass", False):
        args.vault_password = getpass.getpass("Vault password: ")
    if getattr(args, "vault_password_file", None) or getattr(args, "vault_password", None) is not None:
        use_vault(args.vault_password_file, getattr(args, "vault_password", None))


def _hostfile_error():
    from torchfleet.collection import module_util

    return module_util("_hostfile").HostfileError


if __name__ == "__main__":
    sys.exit(main())
