"""Stopping runs on the head (torchrun_launch, state=stopped): each run's supervisor first, which
ends its run in order and records that it was stopped, then a sweep of whatever is left."""

from __future__ import annotations

import os
import signal
import time

from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_lock
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import slurm
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.board import others_alive
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.processes import find_run_processes, stop_processes
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.record import process_start
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.report import group_runs


def stop_supervisors(procs, grace: int) -> None:
    """A run's supervisor, asked first, stops the whole run in order and records that it was
    stopped; the sweep after it finds what it could not end. It needs TERM's grace on the
    launcher, again on the head's leftovers, and the other nodes' clean-up (grace + 20 s)."""
    supervisors = [proc for proc in procs if proc["supervisor"]]
    for proc in supervisors:
        try:
            os.kill(proc["pid"], signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + 3 * grace + 40
    while time.monotonic() < deadline and any(
            process_start(proc["pid"]) is not None for proc in supervisors):
        time.sleep(0.2)


# Seconds a stop waits for a start in flight on the head (its checks, the files it sends) to have
# recorded its run, or given up, so that it stops that run too instead of missing it.
START_IN_FLIGHT_WAIT = 120


def run_stopped(module):
    run_id = module.params["run_id"]
    if not module.check_mode:
        _launch_lock.wait_free(START_IN_FLIGHT_WAIT)
    procs = find_run_processes({run_id} if run_id else None)
    jobs = slurm.run_jobs({run_id} if run_id else None)
    result = {"changed": bool(procs or jobs), "runs": group_runs(procs),
              "stopped": [{key: proc[key] for key in ("pid", "run_id", "cmdline")}
                          for proc in procs], "jobs": jobs,
              # Other accounts' runs announced here and alive: never stopped, only shown (status).
              "others": [{key: entry.get(key) for key in ("run_id", "account", "state", "started", "world_size", "head")}
                         for entry in others_alive()],
              # What `torchfleet status` shows of a team's Slurm: every account's jobs.
              "queue": slurm.queue() if module.check_mode else []}
    if module.check_mode or not (procs or jobs):
        module.exit_json(**result)
    stop_supervisors(procs, module.params["stop_grace"])
    left = find_run_processes({proc["run_id"] for proc in procs})
    survivors = stop_processes(left, module.params["stop_grace"]) if left else []
    # A run's Slurm job that its supervisor did not end (killed, or the job still pending when
    # it died): found by its name and comment, cancelled here.
    failed = []
    for job in slurm.run_jobs({job["run_id"] for job in jobs}) if jobs else []:
        try:
            slurm.cancel(job["job_id"])
        except slurm.SlurmError as err:
            failed.append(str(err))
    if failed:
        module.fail_json(msg="; ".join(failed), **result)
    if survivors:
        pids = ", ".join(f"{proc['pid']} ({proc['run_id']})" for proc in survivors)
        module.fail_json(msg=f"processes survived SIGKILL: {pids}; check them (uninterruptible "
                             f"I/O, or another PID namespace's view?)",
                         survivors=[proc["pid"] for proc in survivors], **result)
    module.exit_json(**result)
