"""A launch under Slurm (torchrun_launch, scheduler=slurm): the checks before anything is
submitted, and the job the run's supervisor submits (sbatch's argv and the batch script)."""

from __future__ import annotations

import os
import subprocess

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import batch_script
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import slurm
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import PlanError
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.renderer import render


def slurm_job(module, plan, run_dir, paths):
    """(sbatch argv, the batch script, its path, the script's options) of a run under Slurm;
    refuses what Slurm would refuse, or cannot run under it, before anything is submitted or
    changed."""
    p = module.params
    sbatch = module.get_bin_path("sbatch")
    if not sbatch or not module.get_bin_path("scontrol"):
        module.fail_json(msg=f"scheduler=slurm, but the head {plan.request.head} has no sbatch and scontrol: "
                             f"install Slurm's client commands there (slurm-client), or launch without "
                             f"the scheduler", run_id=plan.run_id)
    problem = batch_script.extra_args_problem(p["slurm_extra_args"], "slurm_extra_args")
    if problem:
        module.fail_json(msg=f"refusing to submit: {problem}", run_id=plan.run_id)
    try:
        if p["slurm_time_limit"]:
            slurm.check_time_limit(p["slurm_time_limit"])
        if p["slurm_account"]:
            slurm.check_name(p["slurm_account"], "slurm_account")
        partition = slurm.check_partition(p["slurm_partition"], len(plan.nodes), p["slurm_time_limit"])
    except (slurm.SlurmError, OSError, subprocess.SubprocessError) as err:
        module.fail_json(msg=f"refusing to submit: {err}", run_id=plan.run_id)
    head = next(node for node in plan.nodes if node.name == plan.request.head)
    slots = plan.request.nproc_per_node or head.slots
    if p["mode"] == "rank" and len({node.slots for node in plan.nodes}) > 1:
        module.fail_json(msg="scheduler=slurm: the batch script gives every node the same slots, but "
                             "these nodes' slots differ; set nproc_per_node", run_id=plan.run_id)
    allocation = batch_script.for_allocation(plan, "slurm", len(plan.nodes), slots, run_id=plan.run_id)
    try:
        rendered = render(allocation)
    except PlanError as err:
        module.fail_json(msg=str(err), run_id=plan.run_id)
    options = {"gpus_per_node": p["slurm_gpus_per_node"], "walltime": p["slurm_time_limit"], "queue": partition,
               "account": p["slurm_account"], "whole_nodes": p["batch_whole_nodes"],
               "extra_args": list(p["slurm_extra_args"])}
    script = batch_script.batch_script(
        "slurm", allocation, rendered, nodes=len(plan.nodes), job_name=plan.run_id, fixed_run_id=True,
        writer=batch_script.MODULE_WRITER, **options)
    script_path = os.path.join(run_dir, "job.sbatch")
    # Named after the run, with torchfleet's comment: `stop` finds it whatever its supervisor's state.
    # --no-requeue: restarts are the supervisor's (max_restarts, the nodes that answer); a job Slurm
    # requeued after a node failure would run again behind it, on the failed node's allocation.
    argv = [sbatch, "--parsable", f"--output={paths['launcher']}", f"--chdir={p['chdir'] or run_dir}",
            f"--comment={slurm.JOB_COMMENT}", "--no-requeue", script_path]
    return argv, script, script_path, dict(options, slots=slots)
