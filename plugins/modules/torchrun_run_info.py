#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: torchrun_run_info
short_description: The runs of the cluster, from their records on the head
version_added: "1.0.0"
description:
  - Reads the record (C(state.json)) that each run's supervisor keeps in the run's directory on
    the head, under O(log_dir), and those of runs launched with a log_dir of their own, which
    the account's index of runs on the head (C(~/.local/state/torchfleet/runs), a link per run)
    names; returns them newest first. Changes nothing.
  - Other accounts' records are theirs to read; their runs alive on the head are returned apart
    (RV(others)), from the run board every launch announces its run on.
  - A record that says V(running) while its supervisor is gone (killed, out of memory, the head
    rebooted) is returned as V(lost), never as V(running).
  - Directories of runs without a record (started before runs had supervisors) are left out.
    torchfleet never deletes a run's directory.
options:
  log_dir:
    description: The directory holding one directory per run, as given to M(torchfleet.cluster.torchrun_launch).
    type: path
    default: ~/torchfleet/runs
  run_id:
    description: Only this run (RV(runs) is then empty or holds one record).
    type: str
  stacks:
    description:
      - With O(run_id), also the Python stacks its supervisor took of every rank when an attempt hung
        (RV(stacks)).
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: N/A
  platform:
    platforms: posix
notes:
  - Run it on the head node (C(delegate_to)), as the training account or root.
seealso:
  - module: torchfleet.cluster.torchrun_launch
author:
  - torchfleet developers (@torchfleet)
"""

EXAMPLES = r"""
- name: The runs of the cluster, newest first
  torchfleet.cluster.torchrun_run_info:
    log_dir: ~/torchfleet/runs
  delegate_to: "{{ torchfleet_head }}"
  become: true
  become_user: torchfleet
  register: runs

- name: Wait until a detached run has ended
  torchfleet.cluster.torchrun_run_info:
    run_id: tf-20261123-101502-ab12cd
  register: run
  until: run.runs[0].state not in ['starting', 'running', 'restarting']
  retries: 720
  delay: 10
"""

RETURN = r"""
stacks:
  description:
    - With O(stacks), the Python stacks of the run's ranks (every thread, as faulthandler writes them)
      by attempt (C(attempt_N)) and rank, taken when that attempt hung; empty when none hung.
  returned: with O(stacks)
  type: dict
  sample: {attempt_0: {"2": "Current thread 0x00007f... (most recent call first):\n  File \"/r/hang.py\", line 12 in stuck"}}
now:
  description:
    - The head's clock as the records were read (seconds since the epoch), against which a run's
      age is told (C(torchfleet runs --prune --older-than)); never another machine's clock.
  returned: always
  type: float
  sample: 1796040000.5
others:
  description:
    - Other accounts' runs alive on the head, from its run board (C(/var/lib/torchfleet/board)), each
      with C(run_id), C(account) (the owner of the entry), C(state) (V(running) or V(starting)),
      C(started), C(world_size), C(head) and C(nodes). Their records are their accounts' own.
  returned: always
  type: list
  elements: dict
jobs:
  description:
    - Every account's jobs in Slurm's queue on the head (C(squeue)), each with C(job_id), C(name)
      (a torchfleet run's id), C(user), C(state) (Slurm's), C(submitted) and C(torchfleet) (whether
      torchfleet submitted it). Empty where Slurm is not installed, or with O(run_id).
  returned: always
  type: list
  elements: dict
runs:
  description: The runs' records, newest first.
  returned: always
  type: list
  elements: dict
  contains:
    run_id:
      description: The run's id (E(TORCHFLEET_RUN_ID) of its processes).
      type: str
      sample: tf-20261123-101502-ab12cd
    state:
      description: V(starting), V(running), V(restarting) (between two attempts), V(succeeded), V(failed), V(stopped), V(timed_out), V(hung) or V(lost).
      type: str
      sample: failed
    rc:
      description: The run's exit status (death by signal N is 128+N); null while it runs.
      type: int
      sample: 3
    started:
      description: When it started (UTC, ISO 8601).
      type: str
    ended:
      description: When it ended (UTC, ISO 8601); null while it runs.
      type: str
    duration:
      description: Seconds from the launcher's start to its end; null while it runs.
      type: float
    world_size:
      description: Workers in the run.
      type: int
    nodes:
      description: Node names in launch order (node rank order).
      type: list
      elements: str
    command:
      description: The launcher's command, shell-quoted.
      type: str
    failed_rank:
      description: The first rank that failed, when one did.
      type: int
    failed_host:
      description: The node it ran on (or the node that died or went silent).
      type: str
    lost_nodes:
      description:
        - The nodes that died or were silent during the run, each with the time it died or last
          answered (the head's clock, UTC, ISO 8601).
      type: dict
    failed_exit_code:
      description: Its exit code (128+N for signal N).
      type: int
    failed_log:
      description: The failing rank's own log, on RV(runs[].failed_host).
      type: str
    restarts:
      description: How many times the run was restarted (max_restarts of M(torchfleet.cluster.torchrun_launch)).
      type: int
    attempts:
      description:
        - With restarts, each attempt in order (attempt, started, ended, nodes, world_size, cause,
          workers, port; joined and left, the nodes that came into and went out of the world
          since the attempt before, such as a spare for a lost node or a node back), as
          M(torchfleet.cluster.torchrun_launch) returns them.
      type: list
      elements: dict
    progress:
      description:
        - Each rank's last progress in the current attempt, by rank (its node, when it last wrote output or
          a C(TORCHFLEET_STEP) mark, the head's clock, and the last step it marked).
      type: dict
    hung:
      description:
        - Why the last hung attempt was ended (O(torchfleet.cluster.torchrun_launch#module:hang_timeout)), with
          the last progress, the timeout, the ranks that stopped first and their names.
      type: dict
    not_taken_back:
      description:
        - Nodes lost earlier that answer again but that the run did not grow back to, each with why
          (its Python environment or cluster interface changed, another run alive there).
      type: dict
    groups:
      description:
        - With fault_tolerance torchft, each node's replica group, by node name. C(group) its
          REPLICA_GROUP_ID, C(state) (running, lost, done or failed) C(since) when, C(starts) and
          C(restarts) (after failures of its own), C(joined) when it last began training, C(cause)
          of a loss or failure, and C(losses), the last ones with their times and causes.
      type: dict
    failed_log_tail:
      description: The last lines of that log.
      type: list
      elements: str
    log_dir:
      description: The run's directory on the head.
      type: str
    msg:
      description: How the run ended, in words.
      type: str
    scheduler:
      description: V(none) (mpirun over ssh) or V(slurm) (an sbatch job).
      type: str
    job_id:
      description: The run's Slurm job; null without a scheduler.
      type: str
    job_state:
      description: The job's state as Slurm last said it (V(PENDING), V(RUNNING), V(COMPLETED), ...).
      type: str
    job_reason:
      description: Slurm's reason for the job's state (why it is pending).
      type: str
    batch_host:
      description: The node the job's script ran on, which writes its output.
      type: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import slurm
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.board import others_alive
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.record import list_runs, runs_index
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.stacks import kept_stacks


def main():
    module = AnsibleModule(
        argument_spec={
            "log_dir": {"type": "path", "default": "~/torchfleet/runs"},
            "run_id": {"type": "str"},
            "stacks": {"type": "bool", "default": False},
        },
        required_if=[("stacks", True, ("run_id",))],
        supports_check_mode=True,
    )
    run_id = module.params["run_id"]
    if run_id is not None and (not run_id or "/" in run_id or run_id in (".", "..")):
        module.fail_json(msg=f"run_id {run_id!r} is not a run id (tf-YYYYMMDD-HHMMSS-xxxxxx or "
                             f"the one given at launch); leave it out to list every run")
    others = [{key: entry.get(key) for key in ("run_id", "account", "state", "started", "world_size", "head", "nodes")}
              for entry in others_alive() if run_id is None or entry["run_id"] == run_id]
    runs = list_runs(module.params["log_dir"], run_id, runs_index())
    taken = kept_stacks(runs[0]["log_dir"]) if module.params["stacks"] and runs else {}
    module.exit_json(changed=False, runs=runs, others=others, jobs=slurm.queue() if run_id is None else [],
                     now=time.time(), **({"stacks": taken} if module.params["stacks"] else {}))


if __name__ == "__main__":
    main()
