"""A run's Slurm job: submitted, waited for as a Popen is, cancelled, and written again for a
restart (a new job of the nodes that answer, without the Slurm nodes lost)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from . import batch_script, slurm
from .record import LAUNCHER_LOG
from .renderer import render

JOB_SCRIPT = "job.sbatch"  # the first attempt's, in the run's directory


def first_job(plan, partition: str | None, sbatch: str, run_dir: str) -> tuple[list[str], str, dict]:
    """(sbatch's argv, the batch script, the script's options) of a run under Slurm: `plan` on an
    allocation of its nodes, in `partition`. One writer for the launch module's job and for
    `torchfleet render --scheduler slurm`; PlanError where the allocation cannot be rendered."""
    request = plan.request
    head = next(node for node in plan.nodes if node.name == request.head)
    slots = request.nproc_per_node or head.slots
    options = {"gpus_per_node": request.slurm_gpus_per_node, "walltime": request.slurm_time_limit,
               "queue": partition, "account": request.slurm_account, "whole_nodes": request.batch_whole_nodes,
               "extra_args": list(request.slurm_extra_args)}
    script = job_script(plan, slots, plan.run_id, options)
    # Named after the run, with torchfleet's comment: `stop` finds it whatever its supervisor's state.
    # --no-requeue: restarts are the supervisor's (max_restarts, the nodes that answer); a job Slurm
    # requeued after a node failure would run again behind it, on the failed node's allocation.
    argv = [sbatch, "--parsable", f"--output={os.path.join(run_dir, LAUNCHER_LOG)}",
            f"--chdir={request.chdir or run_dir}", f"--comment={slurm.JOB_COMMENT}", "--no-requeue",
            os.path.join(run_dir, JOB_SCRIPT)]
    return argv, script, dict(options, slots=slots)


def job_script(plan, slots: int, run_id: str, options: dict) -> str:
    """The batch script of a run's job: `plan` on an allocation of its nodes, `slots` each, the
    script's header from `options` (batch_script.batch_script's)."""
    allocation = batch_script.for_allocation(plan, "slurm", len(plan.nodes), slots, run_id=run_id)
    return batch_script.batch_script("slurm", allocation, render(allocation), nodes=len(plan.nodes),
                                     job_name=run_id, fixed_run_id=True, writer=batch_script.MODULE_WRITER,
                                     **options)


class SlurmJob:
    """The run's Slurm job, waited for as a Popen is (wait, returncode); its record follows the
    job's state and Slurm's reason while it is pending."""
    POLL = 0.5  # seconds between two questions to slurmctld

    def __init__(self, run):
        self.run, self.job_id, self.info, self.returncode = run, None, {}, None
        self.pid, self.started, self._next = None, False, 0.0
        self.latest: dict = {}  # scontrol's last answer (info: as last recorded)

    def submit(self, env: dict) -> None:
        self.job_id = slurm.submit(self.run.plan.sbatch, env, self.run.plan.cwd)
        self.run.keeper.launched(job_id=self.job_id, job_state="PENDING",
                                 msg=f"run {self.run.plan.run_id} is Slurm job {self.job_id}, submitted")

    def wait(self, timeout: float):
        now = time.monotonic()
        if now < self._next:
            time.sleep(min(timeout, self._next - now))
            raise subprocess.TimeoutExpired("scontrol", timeout)
        self._next = now + self.POLL
        info = slurm.job(self.job_id) if self.job_id else None  # never submitted: nothing of it runs
        self.latest = info or self.latest
        if info is None:  # Slurm forgot the job (MinJobAge): it ended, how is not known
            self.returncode = 1
            return self.returncode
        if info:
            self.update(info)
            if info.get("JobState") in slurm.ENDED:
                self.returncode = slurm.returncode(info)
                return self.returncode
        raise subprocess.TimeoutExpired("scontrol", timeout)

    def update(self, info: dict) -> None:
        state, reason = info.get("JobState"), info.get("Reason")
        if (state, reason) == (self.info.get("JobState"), self.info.get("Reason")):
            return
        self.info = info
        changes: dict = {"job_state": state, "job_reason": reason,
                         "msg": f"run {self.run.plan.run_id} is Slurm job {self.job_id}: {state}"
                                + (f" ({reason})" if reason and reason != "None" else "")}
        # Started: running now, or ended after running a while (a pending job cancelled never was).
        ran = state in ("RUNNING", "COMPLETING", "SUSPENDED", "STOPPED") or (
            state in slurm.ENDED and info.get("RunTime", "00:00:00") != "00:00:00")
        if ran and not self.started:
            self.started = True
            changes.update(batch_host=info.get("BatchHost"), job_nodes=slurm.hostnames(info.get("NodeList", "")))
            mapped = self.run.nodes_of_allocation(changes["job_nodes"])
            changes.update(mapped)
            if mapped:  # a restart's --exclude names a lost node as Slurm does
                self.run.slurm_names.update(zip(mapped["nodes"], changes["job_nodes"]))
            if self.run.attempts:  # the attempt's nodes in rank order, once known: the follower reads them
                self.run.attempts[-1].update(nodes=mapped.get("nodes", self.run.attempts[-1]["nodes"]),
                                             job_id=self.job_id, job_nodes=changes["job_nodes"])
                changes["attempts"] = self.run.attempts
        self.run.keeper.update(**changes)

    def cancel(self, grace: int, lost=()) -> str | None:
        """scancel (retried), then wait until Slurm says the job is over (its KillWait, and a
        margin), or holds only `lost` nodes (Slurm names) still: a dead node's part ends only when
        Slurm declares the node down (SlurmdTimeout, minutes), and the other nodes are free
        already. What went wrong, if anything, for the record's warnings."""
        if not self.job_id:  # never submitted: nothing to cancel
            return None
        try:
            slurm.cancel(self.job_id)
        except slurm.SlurmError as err:
            self.returncode = -signal.SIGKILL
            return str(err)
        deadline = time.monotonic() + grace + 60
        while time.monotonic() < deadline:
            try:
                self.wait(1)
                return None
            except subprocess.TimeoutExpired:
                pass
            held = self.latest.get("NodeList", "")
            if lost and self.latest.get("JobState") == "COMPLETING" and set(slurm.hostnames(held)) <= set(lost):
                self.returncode = -signal.SIGTERM
                return None
        self.returncode = -signal.SIGKILL
        return (f"Slurm job {self.job_id} was cancelled but still not over after {grace + 60} s: "
                f"check it with squeue -j {self.job_id}")


def next_job(run, attempt: int, plan, left_out: list) -> list:
    """sbatch's argv for attempt `attempt` under Slurm: the run's request rendered for an
    allocation of `plan`'s nodes (its own rendezvous port and worker log directory), its script
    written as job.ATTEMPT.sbatch, without the Slurm nodes of those `left_out` (--exclude), its
    output added to the run's launcher log."""
    options = dict(run.plan.batch)
    slots = options.pop("slots")
    # The nodes the launch left out (--limit, exclude: an --exclude in the script's header) stay
    # out: sbatch's own --exclude below, for the lost nodes, would override the header's.
    given = [arg for arg in options.get("extra_args", []) if arg.startswith("--exclude=")]
    options["extra_args"] = [arg for arg in options.get("extra_args", []) if arg not in given]
    script = job_script(plan, slots, run.plan.run_id, options)
    path = os.path.join(run.run_dir, f"job.{attempt}.sbatch")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(script)
    # Each a Slurm hostlist (node[1-3] included): joined by ',' as --exclude takes several.
    excluded = [arg.split("=", 1)[1] for arg in given] + sorted(
        run.slurm_names[name] for name in left_out if name in run.slurm_names)
    first = [arg for arg in run.plan.sbatch[:-1] if not arg.startswith(("--exclude=", "--open-mode="))]
    return [*first, *([f"--exclude={','.join(excluded)}"] if excluded else []), "--open-mode=append", path]
