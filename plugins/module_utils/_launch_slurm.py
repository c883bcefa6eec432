"""A launch under Slurm (torchrun_launch, scheduler=slurm): the checks before anything is
submitted, and the job the run's supervisor submits (sbatch's argv and the batch script)."""

from __future__ import annotations

import subprocess

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import batch_script
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import slurm, slurm_job
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import PlanError


def checked_job(module, plan, run_dir):
    """(sbatch argv, the batch script, its path, the script's options) of a run under Slurm
    (slurm_job.first_job); refuses what Slurm would refuse, or cannot run under it, before
    anything is submitted or changed."""
    request = plan.request
    sbatch = module.get_bin_path("sbatch")
    if not sbatch or not module.get_bin_path("scontrol"):
        module.fail_json(msg=f"scheduler=slurm, but the head {request.head} has no sbatch and scontrol: "
                             f"install Slurm's client commands there (slurm-client), or launch without "
                             f"the scheduler", run_id=plan.run_id)
    problem = batch_script.extra_args_problem(request.slurm_extra_args, "slurm_extra_args")
    if problem:
        module.fail_json(msg=f"refusing to submit: {problem}", run_id=plan.run_id)
    try:
        if request.slurm_time_limit:
            slurm.check_time_limit(request.slurm_time_limit)
        if request.slurm_account:
            slurm.check_name(request.slurm_account, "slurm_account")
        partition = slurm.check_partition(request.slurm_partition, len(plan.nodes), request.slurm_time_limit)
    except (slurm.SlurmError, OSError, subprocess.SubprocessError) as err:
        module.fail_json(msg=f"refusing to submit: {err}", run_id=plan.run_id)
    if request.mode == "rank" and len({node.slots for node in plan.nodes}) > 1:
        module.fail_json(msg="scheduler=slurm: the batch script gives every node the same slots, but "
                             "these nodes' slots differ; set nproc_per_node", run_id=plan.run_id)
    try:
        argv, script, options = slurm_job.first_job(plan, partition, sbatch, run_dir)
    except PlanError as err:
        module.fail_json(msg=str(err), run_id=plan.run_id)
    return argv, script, argv[-1], options
