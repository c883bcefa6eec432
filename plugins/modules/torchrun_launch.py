#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: torchrun_launch
short_description: Start a training run on the cluster from the head node, or stop runs
version_added: "1.0.0"
description:
  - With O(state=started) the module runs on the head node. It renders the launch (C(mpirun) with
    one C(torchrun) per node, one MPI rank per GPU, or C(mpiexec) for HPE Cray PALS) with the
    collection's launch renderer, checks every node from the head over C(ssh) (O(check_nodes)),
    refuses to start while a process of an earlier torchfleet run is alive on any node, a node
    does not answer, or the rendezvous port is taken, and puts the script's files where they are
    missing or stale (O(file_contents)). Then it hands the run to a supervisor on the head, a
    small process in a session of its own that owns the launcher for the whole run and outlives
    the module, Ansible and the controller. The supervisor enforces O(launch_timeout), names the
    first rank that failed and quotes its own log from the node it ran on, ends what is left of
    a failed, timed-out or stopped run on every node, and keeps the run's record,
    C(state.json) in the run's directory (see M(torchfleet.cluster.torchrun_run_info)).
  - The module waits for the run to end and reports its exit status, the first rank that failed
    and where every log is; with O(detach=true) it returns as soon as the run's processes run
    on every node. One task and one connection from the controller; the head reaches the nodes
    itself, as C(mpirun) does a moment later.
  - With O(state=stopped) the module runs on any node and stops the torchfleet runs alive there.
    On the head it asks a run's supervisor first, which stops the run in order and records it
    as C(stopped); what is left after that is ended directly.
  - Every process of a run carries E(TORCHFLEET_RUN_ID) in its environment; that is how runs are
    found. Open MPI's remote daemons (C(orted)) do not carry it; they exit by themselves, taking
    their ranks with them, when C(mpirun) goes.
options:
  state:
    description:
      - V(started) launches a run and waits for it; V(stopped) stops runs on this node.
    type: str
    choices: [started, stopped]
    default: started
  nodes:
    description:
      - The nodes of the run. Required with O(state=started).
    type: list
    elements: dict
    suboptions:
      name:
        description: Inventory name of the node, used in messages and results.
        type: str
        required: true
      address:
        description: The node's address on the cluster network; it goes into the hostfile.
        type: str
        required: true
      slots:
        description: Workers (GPUs) on the node.
        type: int
        required: true
      interface:
        description:
          - The network interface holding O(nodes[].address). Required with two or more nodes
            (NCCL and Gloo need it).
        type: str
  head:
    description:
      - Name of the head node (one of O(nodes)); it runs rank 0 and hosts the rendezvous. The
        module must run on this node. Required with O(state=started).
    type: str
  script:
    description: The training script's path on the nodes. Required with O(state=started).
    type: path
  script_args:
    description: Arguments for the script; they reach it on every rank exactly as given.
    type: list
    elements: str
    default: []
  run_id:
    description:
      - With O(state=started), the id of this run, 1 to 64 characters from letters, digits, V(_),
        V(.) and V(-). When omitted one is made, like V(tf-20261121-101502-ab12cd).
      - With O(state=stopped), stop only this run; when omitted, every run on the node.
    type: str
  mode:
    description:
      - V(torchrun) starts one C(torchrun) per node with Open MPI; V(rank) starts one Open MPI
        rank per slot running O(python) O(script); V(mpich) starts one C(torchrun) per node with
        MPICH's C(mpiexec), the flavour O(mpich_launcher) names.
      - With V(mpich) and MPICH's Hydra the head reaches every node over ssh, as with Open MPI,
        and the run has the same checks, records, stop, timeout and clean-up. What Hydra cannot
        do, and so V(mpich) mode does not do - C(log_dir) (Hydra's C(-outfile-pattern) replaces the
        output instead of copying it, so the per-node torchrun logs under C(workers) are the logs),
        the keepalive of O(silent_node_timeout) (a node gone silent ends the run only at
        O(launch_timeout)), O(tree_spawn), O(scheduler=slurm), the ssh connections the probe opened
        (Hydra takes no ssh options). A process killed by a signal N is reported as 128+N from
        torchrun's summary or Hydra's C(EXIT STRING); C(mpiexec)'s own exit status is N.
    type: str
    choices: [torchrun, rank, mpich]
    default: torchrun
  mpich_launcher:
    description:
      - With O(mode=mpich), which C(mpiexec) O(launcher) is. V(hydra) is MPICH's Hydra (also Intel
        MPI's), started with C(-launcher ssh -ppn 1 -f HOSTFILE -bind-to none -genvall -iface IF
        -prepend-rank). V(pals) is HPE Cray PALS, started with C(--ppn 1 --cpu-bind none --hostfile
        HOSTFILE --envall); PALS starts the nodes' processes itself, so the module checks and
        cleans up only the head (set O(check_nodes=false)) and Ansible does it on the other nodes.
      - There is no default; the launch role passes what setup read from C(mpiexec --version)
        (fact C(mpich_found_launcher)), and O(mode=mpich) without it is refused.
    type: str
    choices: [hydra, pals]
  master_port:
    description: Rendezvous port on the head node (E(MASTER_PORT) in rank mode).
    type: int
    default: 29500
  nproc_per_node:
    description:
      - Workers per node in V(torchrun) and V(mpich) modes; default the nodes' O(nodes[].slots),
        which must then be equal.
    type: int
  python:
    description: Python interpreter on the nodes (rank mode).
    type: str
    default: python3
  torchrun:
    description: C(torchrun) on the nodes (torchrun and mpich modes).
    type: str
    default: torchrun
  launcher:
    description:
      - Path of C(mpirun) or C(mpiexec) on the head; default V(mpirun), V(mpiexec) in mpich mode.
        Give the full path (setup records C(mpirun.openmpi) and C(mpiexec.hydra)) where Open MPI
        and MPICH share a node, as the plain names are alternatives either may hold.
    type: str
  network:
    description: The cluster network as a CIDR; Open MPI then uses it for its own traffic.
    type: str
  env_pass:
    description:
      - Names of variables forwarded from the module's environment on the head to every rank
        (C(-x NAME) for Open MPI; values never appear on a command line). Each name listed here
        must be set in the module's environment (use the task's C(environment)), or the module
        fails naming the missing ones.
      - In addition the module always forwards E(PATH), E(LD_LIBRARY_PATH) and every E(NCCL_*)
        variable that is set in its environment (only those set, and not those torchfleet sets
        itself or that O(env_set) or O(env_secrets) name).
    type: list
    elements: str
    default: []
  env_secrets:
    description:
      - Secret variables, name to value (for example an API key read on the controller). The values
        go only into the launcher's environment and travel to the ranks by name; they are never
        on a command line, in the results or in logs the module writes.
    type: dict
    default: {}
  env_set:
    description: Variables set to these values on every rank.
    type: dict
    default: {}
  mpirun_extra_args:
    description:
      - Extra launcher options. Options torchfleet controls (process counts, mapping, hostfile,
        binding, output files, environment, interface MCA parameters) are refused.
    type: list
    elements: str
    default: []
  allow_run_as_root:
    description: Pass C(--allow-run-as-root) to Open MPI, which refuses root without it.
    type: bool
    default: false
  tree_spawn:
    description:
      - Let Open MPI's daemons start further daemons over SSH. By default only the head holds the
        cluster's private key, so the head starts every daemon (C(plm_rsh_no_tree_spawn)).
    type: bool
    default: false
  log_dir:
    description:
      - Directory on the head under which each run gets O(log_dir)/RUN_ID/, holding C(hostfile),
        C(launcher.log) (the launcher's stdout and stderr, each line tagged by Open MPI with the
        process that wrote it), C(ranks/) (Open MPI's per-rank files), C(workers/) (torchrun's
        per-worker files, written on every node under the same path), and the supervisor's
        C(state.json) (the run's record), C(run.json) (its plan, no secret in it),
        C(supervisor/) and C(supervisor.log). Nothing there is ever deleted by torchfleet.
    type: path
    default: ~/torchfleet/runs
  launch_timeout:
    description:
      - Seconds the run may take; when they pass the run is stopped (TERM, then KILL after
        O(stop_grace)) and the module fails with RV(timed_out=true), naming the nodes that no
        longer answer C(ssh) from the head (RV(silent_nodes)). V(0) waits for ever.
    type: int
    default: 0
  silent_node_timeout:
    description:
      - Open MPI modes. Seconds after which a node that went silent (cut off from the network,
        powered off) ends the run. C(mpirun) gets TCP keepalive on its daemon connections
        (C(oob_tcp_keepalive_time), C(_intvl), C(_probes)), so it gives up the silent node's
        daemon and stops the run, the module fails naming that node (RV(failed_host)), and the
        daemon on the cut-off node, its connection to C(mpirun) lost, ends the ranks it started.
        The probes are answered by the node's kernel, so a busy or stalled rank does not count
        as silent.
      - V(0) leaves Open MPI's own settings, which give up a silent node after 480 s at best;
        O(launch_timeout) still bounds the run.
    type: int
    default: 120
  stop_grace:
    description: Seconds between SIGTERM and SIGKILL when a run is stopped.
    type: int
    default: 10
  chdir:
    description:
      - The launcher's working directory on the head. Open MPI starts the ranks on the other nodes
        in the same directory when it exists there (else in the home directory), so relative paths
        in O(script_args) mean the same everywhere. Default, the module's own temporary directory.
    type: path
  file_contents:
    description:
      - Files the run needs at the same path on every node (the script, its config), as paths
        mapped to base64 content; a leading C(~) is the training account's home. Before the
        start, the head hashes each node's copies and writes only the missing or different ones
        (whole or not at all, directories 0750, files 0640). Never shown in output.
    type: dict
    default: {}
  detach:
    description:
      - Return as soon as the run's processes (C(torchrun), or the ranks) run on every node the
        head checks (under O(scheduler=slurm), as soon as the job runs), with RV(state=running)
        and the run id, instead of waiting for its end. Every
        check that refuses a launch still refuses it first. Follow the run with
        C(torchfleet logs -f), C(torchfleet wait) or M(torchfleet.cluster.torchrun_run_info).
    type: bool
    default: false
  detach_when:
    description:
      - With O(detach=true), when to return. V(running), once the run's processes run on every
        node (under O(scheduler=slurm), once the job runs). V(submitted), as soon as the
        supervisor holds the run (mpirun started, or the job submitted, pending or not), for a
        caller that follows the run itself, as C(torchfleet launch) does, printing Slurm's
        reason while the job waits.
    type: str
    choices: [running, submitted]
    default: running
  check_nodes:
    description:
      - Before the start, check every other node from the head over C(ssh) as the running
        account, the way C(mpirun) reaches them, in parallel. A node that does not answer and
        an earlier run still alive there refuse the launch; missing or different
        O(file_contents) are sent. After a run that failed, what is left of it on every node
        is ended the same way. The check's connections stay open (OpenSSH masters in a
        C(/tmp/tf-ssh-*) directory of the running account, closed by the supervisor when the run ends) and
        C(mpirun) starts its daemons through them instead of a new handshake per node, unless
        O(tree_spawn) is set or O(mpirun_extra_args) or the environment set Open MPI's own
        C(plm_rsh_*) options (a C(plm_rsh_args) in an Open MPI parameter file is not seen, and
        the masters' option would override it, so give it in O(mpirun_extra_args) instead). V(false)
        checks the head alone (Cray PALS nodes, which
        C(mpiexec) reaches without C(ssh)); the clean-up on the other nodes is then the
        caller's (O(state=stopped) on each).
    type: bool
    default: true
  expect_packages:
    description:
      - The packages (canonical name to version) that setup installed in the environment of
        O(python) on every node (the cached fact C(python_env_installed)). With O(check_nodes),
        the check before the start reads each node's environment (its distributions' metadata, no
        interpreter started) and refuses the launch when one differs, naming the node and the
        packages, before anything starts. Empty, no such check.
    type: dict
    default: {}
  scheduler:
    description:
      - V(none) starts C(mpirun) on the head, which reaches the other nodes over C(ssh).
      - V(slurm) submits the run as a Slurm batch job with C(sbatch) on the head, as the account
        the module runs as. The job's script (C(job.sbatch) in the run's directory, written by
        the same code as C(torchfleet render --format slurm)) runs C(mpirun) inside the
        allocation, which starts its daemons through Slurm (C(--mca plm slurm)), never C(ssh).
        The job is named after the run id, its output is the run's C(launcher.log) (written on
        the job's first node, the head when the allocation starts with it, or any node with a
        shared home), and the supervisor follows it with C(scontrol) (RV(job_id), Slurm's
        reason while it is pending, its exit code). Stopping the run, and O(launch_timeout), call
        C(scancel). O(mode=mpich) and O(tree_spawn) cannot run under it and are refused, as are
        a head without C(sbatch), an unknown or down partition, a partition with fewer nodes than
        O(nodes), and a time limit Slurm would reject, before anything is submitted.
    type: str
    choices: [none, slurm]
    default: none
  slurm_partition:
    description: With O(scheduler=slurm), the partition (C(--partition)); default Slurm's default.
    type: str
  slurm_account:
    description: With O(scheduler=slurm), the account charged (C(--account)).
    type: str
  slurm_time_limit:
    description:
      - With O(scheduler=slurm), the job's time limit (C(--time)) in a form C(sbatch) accepts
        (V(90), V(01:30:00), V(1-00:00:00)); at most the partition's. Default the partition's.
    type: str
  slurm_gpus_per_node:
    description:
      - With O(scheduler=slurm), GPUs per node requested as Slurm GRES (C(--gpus-per-node));
        unset, none are requested (a cluster whose GPUs are not GRES gives them to every job).
    type: int
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - With O(state=started) check mode renders and returns the exact command, hostfile and
        environment (secrets redacted), and neither runs nor writes anything. It fails where the
        start would fail, on any node where a run is alive, and on the head (the machine that
        holds the head's address) when the rendezvous port is taken.
      - With O(state=stopped) it reports the runs that would be stopped.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Run O(state=started) on the head node (C(delegate_to)), O(state=stopped) on every node.
  - Nothing that happens to the caller ends a run once it has started. When the connection that
    started the module goes away (C(ansible-playbook) killed or interrupted with Ctrl-C, which
    kills Ansible's own C(ssh), a lost network, a closed terminal) or the module gets SIGHUP or
    SIGKILL, the run goes on under its supervisor and records its end. SIGTERM or SIGINT sent to
    the module itself stop the run, as O(state=stopped) does.
  - The launcher keeps only E(PATH), E(HOME), E(USER), E(LOGNAME), E(SHELL), E(LANG),
    E(LANGUAGE), E(LC_*), E(TZ), E(TMPDIR), E(LD_LIBRARY_PATH), E(SSH_AUTH_SOCK), E(OPAL_PREFIX),
    E(OMPI_MCA_*) and E(PMIX_MCA_*) of the module's environment, plus what O(env_pass) names, so
    that ranks on the head see the same environment as ranks on the other nodes.
  - Without root, only this user's processes are seen and stopped. Processes in other PID
    namespaces (containers) are not this node's and are left alone.
seealso:
  - name: torchrun (Elastic Launch)
    description: The per-node launcher started in torchrun and mpich modes.
    link: https://pytorch.org/docs/stable/elastic/run.html
author:
  - torchfleet developers (@torchfleet)
"""

EXAMPLES = r"""
- name: Train on every node of the cluster, one torchrun per node
  torchfleet.cluster.torchrun_launch:
    nodes:
      - {name: gpu01, address: 10.10.10.11, slots: 8, interface: ens5}
      - {name: gpu02, address: 10.10.10.12, slots: 8, interface: ens5}
    head: gpu01
    script: /srv/train/ddp.py
    script_args: [--epochs, "10"]
    torchrun: /opt/torchfleet/env/bin/torchrun
    network: 10.10.10.0/24
    env_pass: [HF_HOME]
    env_secrets:
      WANDB_API_KEY: "{{ lookup('ansible.builtin.env', 'WANDB_API_KEY') }}"
    launch_timeout: 86400
  delegate_to: gpu01
  run_once: true
  register: torchfleet_run

- name: Show the command without running it
  torchfleet.cluster.torchrun_launch:
    nodes: [{name: gpu01, address: 10.10.10.11, slots: 8}]
    head: gpu01
    script: /srv/train/ddp.py
  check_mode: true
  register: torchfleet_plan

- name: Refuse to launch while a run is alive on any node
  torchfleet.cluster.torchrun_launch:
    state: stopped
  check_mode: true
  register: torchfleet_alive
  failed_when: torchfleet_alive.runs | length > 0

- name: Stop every torchfleet run on every node
  torchfleet.cluster.torchrun_launch:
    state: stopped
    stop_grace: 30
"""

RETURN = r"""
run_id:
  description: The run's id (E(TORCHFLEET_RUN_ID) of all its processes).
  returned: state=started
  type: str
  sample: tf-20261121-101502-ab12cd
argv:
  description: The launcher's command as a list, as run.
  returned: state=started
  type: list
  elements: str
command:
  description: RV(argv) as one shell-quoted string, for display.
  returned: state=started
  type: str
  sample: mpirun -np 2 --map-by ppr:1:node ... /srv/train/ddp.py "$@"' torchfleet --epochs 10
state:
  description:
    - The run's state from its record; V(running) after a start with O(detach=true), else how it
      ended, V(succeeded), V(failed), V(stopped) or V(timed_out).
  returned: state=started and not check mode
  type: str
  sample: succeeded
job_id:
  description: With O(scheduler=slurm), the Slurm job of the run.
  returned: state=started, scheduler=slurm and not check mode
  type: str
  sample: "42"
batch_script:
  description: With O(scheduler=slurm), the batch script submitted (also C(job.sbatch) in the run's directory).
  returned: state=started and scheduler=slurm
  type: str
state_file:
  description: The run's record on the head, kept up to date by its supervisor.
  returned: state=started
  type: str
  sample: /home/torchfleet/torchfleet/runs/tf-20261121-101502-ab12cd/state.json
started:
  description: When the run started (UTC, ISO 8601).
  returned: state=started and not check mode
  type: str
ended:
  description: When the run ended (UTC, ISO 8601); null while it runs.
  returned: state=started and not check mode
  type: str
hostfile:
  description: The hostfile's text, head first.
  returned: state=started
  type: str
  sample: "10.10.10.11 slots=8\n10.10.10.12 slots=8\n"
hostfile_path:
  description: Where the hostfile is (or, in check mode, would be) written on the head.
  returned: state=started
  type: str
env:
  description:
    - Variables set in the launcher's environment and forwarded to every rank; forwarded names
      show as V(<inherited>), secrets as V(<redacted>).
  returned: state=started
  type: dict
  sample:
    TORCHFLEET_RUN_ID: tf-20261121-101502-ab12cd
    NCCL_SOCKET_IFNAME: ens5
    PATH: <inherited>
per_node_env:
  description: Values that differ on a node from RV(env) (Gloo's interface with mixed names).
  returned: state=started
  type: dict
nodes:
  description: Node names in launch order (head first; node rank order).
  returned: state=started
  type: list
  elements: str
world_size:
  description: Number of training processes.
  returned: state=started
  type: int
  sample: 16
log_dir:
  description: This run's directory on the head, O(log_dir)/RUN_ID.
  returned: state=started
  type: str
launcher_log:
  description: The launcher's combined stdout and stderr.
  returned: state=started
  type: str
rank_logs_dir:
  description:
    - Open MPI's per-rank files (C(1/rank.N/stdout), C(1/rank.N/stderr)), written on the node
      where each rank ran. Empty in mpich mode.
  returned: state=started
  type: str
worker_logs_dir:
  description:
    - torchrun's per-worker files (C(RDZV_*/attempt_N/LOCAL_RANK/stdout.log), C(stderr.log)),
      written on every node under this path. Empty in rank mode.
  returned: state=started
  type: str
rc:
  description: The launcher's exit status; death by signal N is 128+N.
  returned: state=started, when the launcher ran
  type: int
  sample: 0
duration:
  description: Seconds the launcher ran.
  returned: state=started, when the launcher ran
  type: float
  sample: 3611.52
timed_out:
  description: Whether the run outlived O(launch_timeout) and was stopped.
  returned: state=started, when the launcher ran
  type: bool
stdout_tail:
  description: The last lines of the launcher's log.
  returned: state=started, when the launcher ran
  type: list
  elements: str
rank0_tail:
  description: The last lines that global rank 0 printed (its log on the head), the run's own report.
  returned: state=started, when the launcher ran
  type: list
  elements: str
silent_nodes:
  description:
    - After a run that failed, timed out or was interrupted, the nodes that did not answer C(ssh)
      from the head when the module came to end what was left of the run there (cut off from
      the network, or down); empty when every node answered.
  returned: state=started, when the run failed and O(check_nodes) is true with more than one node
  type: list
  elements: str
  sample: [gpu02]
stopped_on_nodes:
  description:
    - After a run that failed, timed out or was interrupted, the processes of the run that were
      still alive on the other nodes and were ended (TERM, O(stop_grace), KILL), by node.
  returned: state=started, when the run failed and O(check_nodes) is true with more than one node
  type: dict
  sample: {gpu02: [4121, 4133]}
failed_rank:
  description:
    - Global rank of the first worker that failed, as reported by torchrun or Open MPI; null when
      no rank failure was reported (for example when the launcher itself failed).
  returned: state=started, when RV(rc) is not 0
  type: int
  sample: 3
failed_host:
  description:
    - Where that rank ran; the inventory name when the launch plan tells, else the host name
      torchrun or Open MPI printed.
    - With no failed rank, the node whose Open MPI daemon C(mpirun) lost (the node went down or
      off the network, or the daemon died), when Open MPI says so.
  returned: state=started, when RV(rc) is not 0
  type: str
failed_exit_code:
  description: That rank's exit status; death by signal N is 128+N.
  returned: state=started, when RV(rc) is not 0
  type: int
failed_log:
  description: That rank's log file, on RV(failed_host); the launcher log when none is known.
  returned: state=started, when RV(rc) is not 0
  type: str
failed_log_tail:
  description:
    - The last lines of RV(failed_log) when it is on the head and not empty, else of the
      launcher log.
  returned: state=started, when RV(rc) is not 0
  type: list
  elements: str
runs:
  description:
    - With O(state=stopped), the runs found alive on this node (in check mode, those that would
      be stopped). With O(state=started), when the launch was refused (check mode included), the
      runs that blocked it, on any node.
  returned: state=stopped; state=started when a live run refused the launch
  type: list
  elements: dict
  contains:
    node:
      description: With O(state=started), the node the run is alive on.
      type: str
    run_id:
      description: The run's id.
      type: str
    pids:
      description: Its processes on that node.
      type: list
      elements: int
stale_files:
  description:
    - Of O(file_contents), the paths missing or different on each node that has any, before the
      start sent them (in check mode, those it would send).
  returned: state=started
  type: dict
  sample: {gpu02: [/home/torchfleet/torchfleet/scripts/train.py]}
unreachable:
  description: The nodes the head could not check over C(ssh), when that refused the launch.
  returned: when a node did not answer
  type: list
  elements: str
drifted:
  description: Node name to how its environment differs from O(expect_packages), when that refused the launch.
  returned: when a node's environment differs from what setup installed
  type: dict
port_holders:
  description: Processes seen holding the rendezvous port on the head, when it refused the launch.
  returned: when the port was taken
  type: list
  elements: str
  sample: ["pid 4242 (python3 -m http.server 29500)"]
survivors:
  description: Processes of a run still alive after SIGKILL (the module then fails).
  returned: when a process survived
  type: list
  elements: int
stopped:
  description: The processes stopped (in check mode, those that would be).
  returned: state=stopped
  type: list
  elements: dict
  contains:
    pid:
      description: Process id.
      type: int
    run_id:
      description: The run it belonged to.
      type: str
    cmdline:
      description: Its command line.
      type: str
"""

import errno
import json
import os
import secrets
import select
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_plan import (
    RESERVED_ENV,
    Node,
    Plan,
    PlanError,
    new_run_id,
    render,
    run_log_dirs,
)
from ansible_collections.torchfleet.cluster.plugins.module_utils import (
    _batch_script, _node_probe, _run_record, _run_supervisor, _slurm)
from ansible_collections.torchfleet.cluster.plugins.module_utils._node_probe import (
    find_run_processes,
    port_holders,
    port_in_use,
    stop_processes,
)
from ansible_collections.torchfleet.cluster.plugins.module_utils._run_report import STOP_HINT, group_runs
from ansible_collections.torchfleet.cluster.plugins.module_utils._run_supervisor import (
    PLAN_FILE,
    SOURCES,
    close_ssh_masters,
    module_source,
    probe_nodes,
)

# Always forwarded when set: the ranks need the launcher's programs, libraries and NCCL tuning.
AUTO_PASS = ("PATH", "LD_LIBRARY_PATH")
# What the launcher keeps of the module's environment. Ranks on the head inherit the launcher's
# whole environment while ranks elsewhere only get what is forwarded by name: keeping little
# makes the head's ranks see what the others see, and keeps Ansible's own variables out.
KEEP_ENV = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ",
                      "TMPDIR", "LD_LIBRARY_PATH", "SSH_AUTH_SOCK", "OPAL_PREFIX"})
KEEP_ENV_PREFIXES = ("LC_", "OMPI_MCA_", "PMIX_MCA_")


def resolve_env_pass(explicit, environ, taken):
    """(names to forward, explicit names missing from environ). Explicit names are kept as
    given (the renderer checks them); automatic ones only when set and not `taken`."""
    names = list(dict.fromkeys(explicit))
    missing = [name for name in names if name not in environ]
    auto = [name for name in AUTO_PASS if name in environ]
    auto += sorted(name for name in environ if name.startswith("NCCL_"))
    names += [name for name in auto if name not in taken and name not in names]
    return names, missing


def launcher_env(environ, passed, rendered_env, secret_values):
    env = {name: value for name, value in environ.items()
           if name in KEEP_ENV or name.startswith(KEEP_ENV_PREFIXES) or name in passed}
    env.update(rendered_env)
    env.update(secret_values)
    return env

# ---------------------------------------------------------------------------------------------
# The rendezvous port and the head's address
# ---------------------------------------------------------------------------------------------


def holds_address(address: str) -> bool:
    """Whether this machine has `address` (binding to an address it lacks fails)."""
    try:
        infos = socket.getaddrinfo(address, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    for family, _type, _proto, _name, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.bind((sockaddr[0], 0))
            return True
        except OSError as err:
            if err.errno != errno.EADDRNOTAVAIL:
                return True  # the address is here; something else is wrong with the probe
    return False


# ---------------------------------------------------------------------------------------------
# state=started
# ---------------------------------------------------------------------------------------------

def _env_value(value):
    # YAML turns `OMP_NUM_THREADS: 4` into an int; anything else odd is left to the renderer,
    # which names it.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


def build(module, run_id, run_dir, control_dir=None):
    p = module.params
    env_set = {name: _env_value(value) for name, value in p["env_set"].items()}
    secret_values = {name: _env_value(value) for name, value in p["env_secrets"].items()}
    for name, value in secret_values.items():
        if not isinstance(value, str):
            module.fail_json(msg=f"env_secrets: {name} has no string value; give it one")
    taken = RESERVED_ENV | set(env_set) | set(secret_values)
    env_pass, missing = resolve_env_pass(p["env_pass"], os.environ, taken)
    nodes = tuple(Node(**node) for node in p["nodes"])
    ranks, workers = run_log_dirs(run_dir, p["mode"])
    paths = {"run": run_dir, "launcher": os.path.join(run_dir, "launcher.log"),
             "ranks": ranks or "", "workers": workers or ""}
    plan = Plan(
        nodes=nodes, head=p["head"], script=p["script"], run_id=run_id,
        hostfile_path=os.path.join(run_dir, "hostfile"), script_args=tuple(p["script_args"]),
        mode=p["mode"], port=p["master_port"], nproc_per_node=p["nproc_per_node"],
        python=p["python"], torchrun=p["torchrun"], launcher=p["launcher"],
        log_dir=paths["ranks"] or None, node_log_dir=paths["workers"] or None,
        network=p["network"], env_pass=tuple(env_pass), env_secrets=tuple(secret_values),
        env_set=env_set, mpirun_extra_args=tuple(p["mpirun_extra_args"]),
        allow_run_as_root=p["allow_run_as_root"], tree_spawn=p["tree_spawn"],
        ssh_control_path=f"{control_dir}/%C" if control_dir else None,
        silent_node_timeout=p["silent_node_timeout"], mpich_launcher=p["mpich_launcher"],
    )
    try:
        rendered = render(plan)
    except PlanError as err:
        module.fail_json(msg=str(err), run_id=run_id)
    if missing:
        module.fail_json(msg=f"env_pass names {', '.join(missing)}, but the module's environment "
                             f"on the head has no such variable: set it for the task "
                             f"(environment:) or remove it from env_pass", run_id=run_id)
    return plan, rendered, secret_values, paths


def head_preflight(module, plan, run_dir, head):
    """Refuse what would stop the run on the head: a missing address, a taken rendezvous port, a
    used run id."""
    if not holds_address(head.address):
        module.fail_json(msg=f"this machine does not have the head's address {head.address} "
                             f"({head.name}): run the launch on the head node (delegate_to: "
                             f"{head.name}) or fix its address", run_id=plan.run_id)
    if port_in_use(plan.port):
        holders = port_holders(plan.port)
        held = f" by {', '.join(holders)}" if holders else ""
        module.fail_json(msg=f"refusing to launch: the rendezvous port {plan.port} is already in "
                             f"use on the head {head.name}{held}; choose another port "
                             f"(-e master_port=N) or stop the process holding it",
                         port_holders=holders, run_id=plan.run_id)
    if os.path.lexists(run_dir):
        module.fail_json(msg=f"{run_dir} already exists: run id {plan.run_id} was used before; "
                             f"give a new run_id or leave it unset", run_id=plan.run_id)


def preflight_nodes(module, plan, run_dir, expect: dict, control_dir=None) -> dict:
    """Everything the start would trip over, on every node, before anything changes: a node ssh
    cannot reach, a run alive anywhere, the head's address, port and run id. Returns the files
    that are missing or stale on each node ({path: SHA-1} `expect`), {name: [paths]}."""
    head = next(node for node in plan.nodes if node.name == plan.head)
    nodes = plan.nodes if module.params["check_nodes"] else [head]
    ssh = module.get_bin_path("ssh", required=len(nodes) > 1)
    request = {"expect": expect}
    if module.params["expect_packages"]:
        request["packages"] = {"python": plan.python, "expect": module.params["expect_packages"]}
    answers = probe_nodes(nodes, head.name, ssh, plan.python, {node.name: request for node in nodes},
                          control_dir=control_dir)
    order = [node.name for node in nodes]
    lost = [name for name in order if "error" in answers[name]]
    if lost:
        named = "; ".join(f"{name}: {answers[name]['error']}" for name in lost)
        module.fail_json(msg=f"refusing to launch: the head {head.name} cannot reach {', '.join(lost)} "
                             f"over ssh as the training account, as mpirun would ({named}). Bring the "
                             f"node back, or run setup.yml again if its address or host key changed",
                         unreachable=lost, run_id=plan.run_id)
    runs = [{"node": name, **run} for name in order for run in group_runs(answers[name]["runs"])]
    if runs:
        listed = "; ".join(f"on {run['node']}: {run['run_id']} (pids {', '.join(map(str, run['pids']))})"
                           for run in runs)
        module.fail_json(msg=f"refusing to launch: an earlier torchfleet run is still alive {listed}. "
                             f"Stop it first with {STOP_HINT}, then launch again", runs=runs,
                         run_id=plan.run_id)
    drifted = [name for name in order if answers[name].get("drift")]
    if drifted:
        listed = "; ".join(f"{name}: {', '.join(answers[name]['drift'])}" for name in drifted)
        module.fail_json(msg=f"refusing to launch: the Python environment {plan.python} is no longer "
                             f"what setup installed, on {listed}. Run setup again "
                             f"(ansible-playbook setup.yml -i INVENTORY) to put it back, then launch",
                         drifted={name: answers[name]["drift"] for name in drifted}, run_id=plan.run_id)
    head_preflight(module, plan, run_dir, head)
    return {name: answers[name]["stale"] for name in order if answers[name]["stale"]}


def send_files(module, plan, files: dict, stale: dict, control_dir=None) -> None:
    """Put the stale files ({path: base64 content} `files`) on the nodes that lack them, whole,
    in parallel."""
    nodes = [node for node in plan.nodes if node.name in stale]
    requests = {node.name: {"write": {path: files[path] for path in stale[node.name]}}
                for node in nodes}
    ssh = module.get_bin_path("ssh", required=any(node.name != plan.head for node in nodes))
    answers = probe_nodes(nodes, plan.head, ssh, plan.python, requests, control_dir=control_dir)
    failed = [name for name, answer in answers.items() if "error" in answer]
    if failed:
        module.fail_json(msg="could not put the script's files on " + "; ".join(
            f"{name}: {answers[name]['error']}" for name in failed) + "; nothing was started",
            stale_files=stale, run_id=plan.run_id)


def ssh_masters(module):
    """A directory for the OpenSSH masters the probe leaves open to each node, which mpirun's ssh
    then rides instead of a handshake of its own per node (plm_rsh_args, see _launch_plan); None
    where mpirun does not ssh from the head to every node itself (mpich mode, tree spawn, Slurm,
    the head alone), in check mode, or when the user set Open MPI's rsh options, which ours would
    override. Short, in /tmp: a socket path has at most 107 bytes."""
    p = module.params
    if (module.check_mode or not p["check_nodes"] or p["tree_spawn"] or p["mode"] == "mpich"
            or p["scheduler"] == "slurm" or len(p["nodes"]) < 2):
        return None
    if any("plm_rsh" in arg for arg in p["mpirun_extra_args"]) or any(
            name in os.environ for name in ("OMPI_MCA_plm_rsh_args", "OMPI_MCA_plm_rsh_agent")):
        return None
    try:
        return tempfile.mkdtemp(prefix="tf-ssh-", dir="/tmp")
    except OSError:
        return None


def run_started(module):
    control_dir = ssh_masters(module)
    module.supervised = False
    try:
        start_run(module, control_dir)
    finally:
        # fail_json and exit_json end the module through SystemExit: this runs after them too.
        # Once the supervisor runs, mpirun's daemons ride the masters and the supervisor closes them.
        if control_dir and not module.supervised:
            # Not required=True: a missing ssh has failed the module already, with its own message.
            close_ssh_masters(module.get_bin_path("ssh"), control_dir,
                              [node["address"] for node in module.params["nodes"]
                               if node["name"] != module.params["head"]])


class _Interrupt:
    """Signals to the module itself: SIGTERM and SIGINT mean 'stop the run', SIGHUP 'stop
    watching it'. Recorded here, acted on by the wait loop."""
    signum = None

    @classmethod
    def handler(cls, signum, _frame):
        cls.signum = signum


def _caller_gone() -> bool:
    """Ansible reads the module's stdout through a pipe (local) or sshd: when the reader is
    gone (ansible-playbook killed, connection lost) a write would fail. poll() tells now."""
    poller = select.poll()
    poller.register(1, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _fd, events in poller.poll(0))


def prepare_run_dir(module, plan, rendered, run_dir, supervisor_plan, result):
    """The run's directory on the head: hostfile, the plan for the supervisor, its files."""
    p = module.params
    try:
        os.makedirs(p["log_dir"], mode=0o750, exist_ok=True)
        os.mkdir(run_dir, 0o750)
        os.chmod(run_dir, 0o750)  # mkdir's mode is cut by the umask
        with open(os.open(plan.hostfile_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640),
                  "w") as handle:
            handle.write(rendered.hostfile)
        lib = os.path.join(run_dir, "supervisor")
        os.mkdir(lib, 0o750)
        for name in SOURCES:
            _node_probe.write_file(os.path.join(lib, name + ".py"), module_source(name).encode())
        _node_probe.write_file(os.path.join(run_dir, PLAN_FILE),
                               json.dumps(supervisor_plan, indent=1).encode())
    except OSError as err:
        module.fail_json(msg=f"cannot prepare the run directory {run_dir}: {err}", **result)
    return lib


def start_supervisor(module, run_dir, lib, env, result):
    """The supervisor, in a session of its own: no signal meant for the module or its caller
    reaches it, and it outlives them. Returns it once it has started the launcher (or ended)."""
    try:
        proc = _run_supervisor.start(sys.executable, os.path.join(lib, "_run_supervisor.py"), run_dir,
                                     dict(env, **{_node_probe.SUPERVISOR_VAR: result["run_id"]}))
    except OSError as err:
        module.fail_json(msg=f"cannot start the run's supervisor with {sys.executable}: {err}", **result)
    module.supervised = True
    while True:
        record = _run_record.read_state(run_dir)
        if record and (record["launcher_pid"] or record.get("job_id") or record["state"] != "running"):
            return proc
        if proc.poll() is not None:
            with open(os.path.join(run_dir, "supervisor.log"), encoding="utf-8", errors="replace") as handle:
                said = handle.read()[-2000:]
            module.fail_json(msg=f"the run's supervisor exited with {proc.returncode} before starting "
                                 f"the launcher: {said}", **result)
        time.sleep(0.02)


def ranks_started(module, plan, record, control_dir) -> bool:
    """Whether a process of the run (torchrun, or a rank), not only mpirun and the supervisor,
    runs on every node it can see (only the head where mpich nodes take no ssh)."""
    head = next(node for node in plan.nodes if node.name == plan.head)
    nodes = plan.nodes if module.params["check_nodes"] else [head]
    launchers = {record["supervisor_pid"], record["launcher_pid"]}
    answers = probe_nodes(nodes, plan.head, module.get_bin_path("ssh"), plan.python,
                          {node.name: {"expect": {}} for node in nodes},
                          control_dir=control_dir)
    return all("error" not in answer and any(
        proc["run_id"] == plan.run_id and proc["pid"] not in launchers for proc in answer["runs"])
        for answer in answers.values())


def follow_run(module, plan, run_dir, supervisor, control_dir) -> dict:
    """Wait for the run: until its ranks run on every node (detach), or until it ends. The
    module's own SIGTERM or SIGINT stops the run; its caller gone (ansible-playbook killed, the
    connection lost, the terminal closed) leaves it running, owned by its supervisor."""
    watched = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    for signum in watched:
        signal.signal(signum, _Interrupt.handler)
    stopping = False
    while True:
        record = _run_record.read_state(run_dir)
        if record["state"] != "running":
            supervisor.wait()
            return record
        if _Interrupt.signum in (signal.SIGTERM, signal.SIGINT) and not stopping:
            supervisor.send_signal(signal.SIGTERM)
            stopping = True
        elif not stopping and (_Interrupt.signum == signal.SIGHUP or _caller_gone()):
            os._exit(0)  # nobody to report to; the supervisor carries on
        elif module.params["detach"] and not stopping and (
                module.params["detach_when"] == "submitted"
                or (record.get("job_state") == "RUNNING" if record.get("job_id")
                    else ranks_started(module, plan, record, control_dir))):
            return record
        time.sleep(0.1)


def slurm_job(module, plan, run_dir, paths):
    """(sbatch argv, the batch script, its path) of a run under Slurm; refuses what Slurm would refuse, or
    cannot run under it, before anything is submitted or changed."""
    p = module.params
    if p["mode"] == "mpich":
        module.fail_json(msg="scheduler=slurm runs Open MPI's mpirun inside the allocation; mode=mpich "
                             "(MPICH's mpiexec) cannot run under it: use mode=torchrun or rank, or "
                             "launch without the scheduler", run_id=plan.run_id)
    if p["tree_spawn"]:
        module.fail_json(msg="scheduler=slurm: Slurm starts mpirun's daemons, so tree_spawn (daemons "
                             "starting daemons over ssh) cannot apply; leave it unset", run_id=plan.run_id)
    sbatch = module.get_bin_path("sbatch")
    if not sbatch or not module.get_bin_path("scontrol"):
        module.fail_json(msg=f"scheduler=slurm, but the head {plan.head} has no sbatch and scontrol: "
                             f"install Slurm's client commands there (slurm-client), or launch without "
                             f"the scheduler", run_id=plan.run_id)
    try:
        if p["slurm_time_limit"]:
            _slurm.check_time_limit(p["slurm_time_limit"])
        if p["slurm_account"]:
            _slurm.check_name(p["slurm_account"], "slurm_account")
        partition = _slurm.check_partition(p["slurm_partition"], len(plan.nodes), p["slurm_time_limit"])
    except (_slurm.SlurmError, OSError, subprocess.SubprocessError) as err:
        module.fail_json(msg=f"refusing to submit: {err}", run_id=plan.run_id)
    head = next(node for node in plan.nodes if node.name == plan.head)
    slots = plan.nproc_per_node or head.slots
    if p["mode"] == "rank" and len({node.slots for node in plan.nodes}) > 1:
        module.fail_json(msg="scheduler=slurm: the batch script gives every node the same slots, but "
                             "these nodes' slots differ; set nproc_per_node", run_id=plan.run_id)
    allocation = _batch_script.for_allocation(plan, "slurm", len(plan.nodes), slots, run_id=plan.run_id)
    try:
        rendered = render(allocation)
    except PlanError as err:
        module.fail_json(msg=str(err), run_id=plan.run_id)
    script = _batch_script.batch_script(
        "slurm", allocation, rendered, nodes=len(plan.nodes), gpus_per_node=p["slurm_gpus_per_node"],
        walltime=p["slurm_time_limit"], queue=partition, account=p["slurm_account"],
        job_name=plan.run_id, fixed_run_id=True, writer="torchfleet.cluster.torchrun_launch")
    script_path = os.path.join(run_dir, "job.sbatch")
    argv = [sbatch, "--parsable", f"--output={paths['launcher']}", f"--chdir={p['chdir'] or run_dir}",
            script_path]
    return argv, script, script_path


def start_run(module, control_dir):
    p = module.params
    run_id = p["run_id"] or new_run_id(datetime.now(timezone.utc), secrets.token_hex(3))
    run_dir = os.path.join(p["log_dir"], run_id)
    plan, rendered, secret_values, paths = build(module, run_id, run_dir, control_dir)
    result = {
        "changed": False, "run_id": run_id, "argv": rendered.argv, "command": rendered.command,
        "hostfile": rendered.hostfile, "hostfile_path": plan.hostfile_path,
        "env": rendered.display_env, "per_node_env": rendered.per_node_env,
        "nodes": list(rendered.nodes), "world_size": rendered.world_size, "log_dir": run_dir,
        "launcher_log": paths["launcher"], "rank_logs_dir": paths["ranks"],
        "worker_logs_dir": paths["workers"], "state_file": os.path.join(run_dir, _run_record.STATE_FILE),
    }
    # {absolute path: base64 content}: the probes hash the decoded bytes and write the text.
    try:
        files, digests = _node_probe.files_to_place(p["file_contents"])
    except ValueError as err:
        module.fail_json(msg=f"file_contents: {err}", run_id=run_id)
    slurm = p["scheduler"] == "slurm"
    sbatch = script = script_path = None
    if slurm:
        sbatch, script, script_path = slurm_job(module, plan, run_dir, paths)
        result.update(argv=sbatch, command=shlex.join(sbatch), batch_script=script)
    stale = preflight_nodes(module, plan, run_dir, digests, control_dir)
    result["stale_files"] = stale
    if module.check_mode:
        module.exit_json(**result)
    if stale:
        send_files(module, plan, files, stale, control_dir)
        result["changed"] = True

    env = launcher_env(os.environ, set(rendered.inherit), rendered.env, secret_values)
    absent = [name for name in (*rendered.inherit, *rendered.secrets) if name not in env]
    if absent:  # mpirun would only warn and start the ranks without them
        module.fail_json(msg=f"not in the launcher's environment: {', '.join(absent)}", **result)
    by_name = {node.name: node for node in plan.nodes}
    supervisor_plan = {
        "run_id": run_id, "argv": rendered.argv, "cwd": p["chdir"], "command": rendered.command,
        "nodes": [vars(by_name[name]) for name in rendered.nodes], "head": plan.head,
        "mode": plan.mode, "nproc": plan.nproc_per_node or by_name[plan.head].slots,
        "world_size": rendered.world_size, "python": plan.python,
        "ssh": module.get_bin_path("ssh") if len(plan.nodes) > 1 else None,
        "check_nodes": p["check_nodes"], "control_dir": control_dir,
        "launch_timeout": p["launch_timeout"], "stop_grace": p["stop_grace"], "paths": paths,
        "scheduler": p["scheduler"], "sbatch": sbatch,
    }
    if slurm:
        supervisor_plan.update(argv=sbatch, command=result["command"])
    lib = prepare_run_dir(module, plan, rendered, run_dir, supervisor_plan, result)
    if slurm:
        try:
            _node_probe.write_file(script_path, script.encode())
        except OSError as err:
            module.fail_json(msg=f"cannot write the batch script {script_path}: {err}", **result)
    result["changed"] = True
    supervisor = start_supervisor(module, run_dir, lib, env, result)
    record = follow_run(module, plan, run_dir, supervisor, control_dir)
    for warning in record.get("warnings", []):
        module.warn(warning)
    keys = ("state", "job_id", "rc", "duration", "timed_out", "stdout_tail", "rank0_tail", "failed_rank",
            "failed_host", "failed_exit_code", "failed_log", "failed_log_tail", "stopped_on_nodes",
            "silent_nodes", "survivors", "started", "ended", "msg")
    # Not a null rc while the run goes on: Ansible fails a task whose result has an rc other than 0.
    result.update({key: record[key] for key in keys if key in record and record[key] is not None})
    if record["state"] == "running":  # detached: the run goes on
        module.exit_json(**result)
    msg = result.pop("msg")
    if _Interrupt.signum is not None:
        msg = f"the module was interrupted by {signal.Signals(_Interrupt.signum).name}; {msg}"
    if record["state"] != "succeeded":
        module.fail_json(msg=msg, **result)
    module.exit_json(**result)


# ---------------------------------------------------------------------------------------------
# state=stopped
# ---------------------------------------------------------------------------------------------

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
            _run_record.process_start(proc["pid"]) is not None for proc in supervisors):
        time.sleep(0.2)


def run_stopped(module):
    run_id = module.params["run_id"]
    procs = find_run_processes({run_id} if run_id else None)
    result = {"changed": bool(procs), "runs": group_runs(procs),
              "stopped": [{key: proc[key] for key in ("pid", "run_id", "cmdline")}
                          for proc in procs]}
    if module.check_mode or not procs:
        module.exit_json(**result)
    stop_supervisors(procs, module.params["stop_grace"])
    left = find_run_processes({proc["run_id"] for proc in procs})
    survivors = stop_processes(left, module.params["stop_grace"]) if left else []
    if survivors:
        pids = ", ".join(f"{proc['pid']} ({proc['run_id']})" for proc in survivors)
        module.fail_json(msg=f"processes survived SIGKILL: {pids}; check them (uninterruptible "
                             f"I/O, or another PID namespace's view?)",
                         survivors=[proc["pid"] for proc in survivors], **result)
    module.exit_json(**result)


NODE_OPTIONS = {
    "name": {"type": "str", "required": True},
    "address": {"type": "str", "required": True},
    "slots": {"type": "int", "required": True},
    "interface": {"type": "str"},
}
ARGUMENT_SPEC = {
    "state": {"type": "str", "default": "started", "choices": ["started", "stopped"]},
    "nodes": {"type": "list", "elements": "dict", "options": NODE_OPTIONS},
    "head": {"type": "str"},
    "script": {"type": "path"},
    "script_args": {"type": "list", "elements": "str", "default": []},
    "run_id": {"type": "str"},
    "mode": {"type": "str", "default": "torchrun", "choices": ["torchrun", "rank", "mpich"]},
    "mpich_launcher": {"type": "str", "choices": ["hydra", "pals"]},
    "master_port": {"type": "int", "default": 29500},
    "nproc_per_node": {"type": "int"},
    "python": {"type": "str", "default": "python3"},
    "torchrun": {"type": "str", "default": "torchrun"},
    "launcher": {"type": "str"},
    "network": {"type": "str"},
    # Names only, never values: no_log=False says so (the name contains "pass").
    "env_pass": {"type": "list", "elements": "str", "default": [], "no_log": False},
    "env_secrets": {"type": "dict", "default": {}, "no_log": True},
    "env_set": {"type": "dict", "default": {}},
    "mpirun_extra_args": {"type": "list", "elements": "str", "default": []},
    "allow_run_as_root": {"type": "bool", "default": False},
    "tree_spawn": {"type": "bool", "default": False},
    "log_dir": {"type": "path", "default": "~/torchfleet/runs"},
    "launch_timeout": {"type": "int", "default": 0},
    "silent_node_timeout": {"type": "int", "default": 120},
    "stop_grace": {"type": "int", "default": 10},
    "chdir": {"type": "path"},
    "file_contents": {"type": "dict", "default": {}, "no_log": True},
    "check_nodes": {"type": "bool", "default": True},
    "expect_packages": {"type": "dict", "default": {}},
    "detach": {"type": "bool", "default": False},
    "detach_when": {"type": "str", "default": "running", "choices": ["running", "submitted"]},
    "scheduler": {"type": "str", "default": "none", "choices": ["none", "slurm"]},
    "slurm_partition": {"type": "str"},
    "slurm_account": {"type": "str"},
    "slurm_time_limit": {"type": "str"},
    "slurm_gpus_per_node": {"type": "int"},
}


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "started", ("nodes", "head", "script"))],
        supports_check_mode=True,
    )
    for name in ("launch_timeout", "silent_node_timeout", "stop_grace"):
        if module.params[name] < 0:
            module.fail_json(msg=f"{name} must be 0 or more seconds, got {module.params[name]}")
    if module.params["state"] == "stopped":
        run_stopped(module)
    else:
        run_started(module)


if __name__ == "__main__":
    main()
