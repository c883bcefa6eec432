"""`torchfleet runs`: the cluster's runs from their records on the head, every account's with
--all-users, and --prune; `status RUN_ID`'s one record."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime

from torchfleet.cli.playbooks import adhoc, finish
from torchfleet.cli.usage import ACTIVE_STATES, UsageError
from torchfleet.node_values import NodeValueError, number, run_record


def read_runs(args: argparse.Namespace, run_id: str | None = None, stacks: bool = False):
    """(the outcome, the cluster variables with `head_now`, the head's clock then, the records
    newest first; only `run_id`'s if given) from the head (torchrun_run_info); with `stacks`, the
    answer also holds the run's stacks."""
    from torchfleet.inventory import cluster_vars

    found = cluster_vars(args.inventory, args.extra_vars)
    module_args = {"log_dir": found["log_dir"], **({"run_id": run_id} if run_id else {}),
                   **({"stacks": True} if stacks else {})}
    outcome = adhoc(args, "torchfleet.cluster.torchrun_run_info", module_args,
                    found["head"], ["--become", "--become-user", found["user"]])
    answer: dict = next((item["res"] for item in outcome.progress.results), {})
    now = answer.get("now")  # the head's clock: a number, or none known
    return outcome, dict(found, head_now=None if now is None else number(now, "the head's clock"),
                         others=answer.get("others", []), jobs=answer.get("jobs", [])), answer.get("runs", [])


def listed_fields(run: dict) -> dict:
    from torchfleet.collection import module_util

    run_record = module_util("_on_node.record")
    return {key: run.get(key) for key in run_record.RunRecord.keys(run_record.LISTED)}


def runs_command(args: argparse.Namespace) -> int:
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
    outcome, found, runs = read_runs(args)
    if outcome.rc != 0:
        return finish(args, outcome, {})
    if args.prune:
        return prune(args, found, runs)
    listed = [listed_fields(run) for run in runs]
    if args.all_users:
        listed = every_accounts(listed, found)
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


def every_accounts(listed: list, found: dict) -> list:
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


PER_RANK_UP_TO = 16  # ranks shown one by one in `status`; more are shown per node (its oldest rank)


def progress_lines(progress: dict, now: float) -> list[str]:
    """The ranks' last progress as `status RUN` shows it: the age of each rank's (or each node's
    oldest rank's, where ranks are many), the step it marked; a run whose newest progress is older
    than half its hang timeout is `stalled?`, and so is a rank or node past that."""
    ages = {rank: now - datetime.fromisoformat(entry["last"]).timestamp()
            for rank, entry in progress.get("ranks", {}).items()}
    if not ages:
        return []
    after = progress.get("hang_after")
    half = after / 2 if after else None
    newest = min(ages.values())
    head = f"{'progress:':<18} newest {newest:.0f} s ago; hung after {f'{after} s' if after else 'never'} without"
    lines = [head + (" (stalled?)" if half and newest > half else "")]
    ranks = progress["ranks"]
    if len(ranks) <= PER_RANK_UP_TO:
        rows = [(f"rank {rank} on {entry.get('node') or '?'}", ages[rank], entry)
                for rank, entry in sorted(ranks.items(), key=lambda item: int(item[0]))]
    else:
        oldest: dict = {}
        for rank, entry in ranks.items():
            node = entry.get("node") or "?"
            if node not in oldest or ages[rank] > ages[oldest[node]]:
                oldest[node] = rank
        rows = [(f"{node} (rank {rank}, its oldest)", ages[rank], ranks[rank])
                for node, rank in sorted(oldest.items())]
    for what, age, entry in rows:
        step, rate = entry.get("step"), entry.get("rate")
        lines.append(f"  {what}: {age:.0f} s ago{f', step {step}' if step is not None else ''}"
                     f"{f', {rate} steps/s' if rate is not None else ''}{'  stalled?' if half and age > half else ''}")
    lines += [f"  straggler: {named}" for named in (progress.get("stragglers") or {}).values()]
    return lines


def run_status(args: argparse.Namespace) -> int:
    """One run's record, as `runs` lists it: key: value lines, or JSON."""
    outcome, found, runs = read_runs(args, args.run_id)
    if outcome.rc != 0:
        return finish(args, outcome, {})
    if not runs:
        print(f"torchfleet status: no run {args.run_id} on the head (torchfleet runs lists them)",
              file=sys.stderr)
        return 1
    record = listed_fields(runs[0])
    if args.json:
        print(json.dumps(record, indent=1))
    else:
        for key, value in record.items():
            if key == "progress" and value and record.get("state") in ACTIVE_STATES:
                print("\n".join(progress_lines(value, found["head_now"] or time.time())))
            elif value not in (None, [], {}, "") and key != "progress":
                print(f"{key + ':':<18} {value if not isinstance(value, (list, dict)) else json.dumps(value)}")
    return 0


def prune(args: argparse.Namespace, found: dict, runs: list) -> int:
    """Remove the chosen ended runs' directories on every node of the cluster."""
    from torchfleet.collection import module_util

    # The records are the training account's to write: one not as torchfleet writes it (a run id,
    # a plain log_dir) is left out, named; leaving one out never prunes a run more.
    records = []
    for run in runs:
        try:
            records.append(run_record(run))
        except NodeValueError as error:
            print(f"torchfleet: left alone, not as torchfleet writes it: {error}", file=sys.stderr)
    # Ages on the head's clock, as the records' start times are: never the controller's.
    chosen = module_util("_run_prune").prunable(records, args.keep, args.older_than, now=found["head_now"])
    if not chosen:
        print("torchfleet: no ended run to prune", file=sys.stderr)
        if args.json:
            print(json.dumps({"pruned": [], "kept": {}, "rc": 0}, indent=1))
        return 0
    outcome = adhoc(args, "torchfleet.cluster.torchrun_prune",
                    {"log_dir": found["log_dir"], "run_ids": chosen,
                     "run_dirs": {run["run_id"]: run["log_dir"] for run in records
                                  if run["run_id"] in chosen and run["log_dir"]}}, found["group"],
                    ["--become", "--become-user", found["user"]])
    kept = {item["host"]: item["res"].get("kept") for item in outcome.progress.results
            if isinstance(item["res"].get("kept"), dict) and item["res"]["kept"]}
    pruned = [run_id for run_id in chosen if not any(run_id in why for why in kept.values())]
    if not args.json:
        print(f"torchfleet: pruned {len(pruned)} run(s){': ' + ', '.join(pruned) if pruned else ''}")
        for host, why in sorted(kept.items()):
            for run_id, reason in why.items():
                print(f"torchfleet: kept {run_id} on {host}: {reason}", file=sys.stderr)
    return finish(args, outcome, {"pruned": pruned, "kept": kept})
