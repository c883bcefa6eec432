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
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - torchfleet.cluster.torchrun_launch_options
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
  - One launch at a time. A start holds a lock on the head (C(torchfleet-launch-UID.lock) in the
    temporary directory) from before its checks of the nodes until its run is recorded, so that of
    two starts at once one is refused, naming the other's run; with O(state=stopped), the stop
    waits for such a start (up to 120 s) so that it stops its run too.
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
  returned: state=started or state=restarted
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
      ended, V(succeeded), V(failed), V(stopped), V(timed_out) or V(hung).
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
interface_changed:
  description:
    - The nodes whose cluster interface no longer holds the address setup recorded (a NIC renamed
      after a reboot or a driver update), each with what setup recorded and what the node has now,
      when that refused the launch.
  returned: when a node's cluster interface changed since setup
  type: list
  elements: str
restarts:
  description: How many times the run was restarted (O(max_restarts), or by hand with O(state=restarted)).
  returned: state=started or state=restarted
  type: int
attempt:
  description: With O(state=restarted), the number of the attempt that the restart starts.
  returned: state=restarted
  type: int
attempts:
  description:
    - With restarts, each attempt of the run in order, the last the one that ended it.
  returned: when the run was restarted
  type: list
  elements: dict
  contains:
    attempt:
      description: Its number, from 0.
      type: int
    started:
      description: When it started (UTC, ISO 8601).
      type: str
    ended:
      description: When it ended.
      type: str
    nodes:
      description: The nodes it ran on, in rank order.
      type: list
      elements: str
    world_size:
      description: Its world size.
      type: int
    cause:
      description: Why it ended (the node lost, or the rank and its exit code); empty for the last of a run that succeeded.
      type: str
    workers:
      description: Its torchrun worker logs' directory on each node.
      type: str
    joined:
      description: The nodes in its world that were not in the attempt before (a spare for a lost node, a node back).
      type: list
      elements: str
    left:
      description: The nodes of the attempt before that are not in its world (lost).
      type: list
      elements: str
hung:
  description:
    - Why the attempt was ended hung (O(hang_timeout)), with the last progress of any rank (the head's clock), the
      timeout in seconds, the ranks that stopped first (the lowest step marked, else the oldest progress)
      and a sentence naming them with their nodes.
  returned: when an attempt hung
  type: dict
  sample: {since: "2026-11-29T02:00:00+00:00", timeout: 60, stopped_first: [2], named: "rank 2 on gpu03 (step 19, last progress at 2026-11-29T02:00:00+00:00)"}
not_taken_back:
  description:
    - Nodes lost earlier that answer again but that the run did not grow back to (O(rejoin_after)),
      each with why.
  returned: when a node back failed the launch's checks
  type: dict
  sample: {gpu02: "its Python environment is no longer what setup installed: numpy is missing (spec: 2.1.0)"}
lost_nodes:
  description:
    - The nodes that died, or were silent, during the run, each with the time it died or last
      answered (the head's clock, UTC, ISO 8601), when that ended the run (O(heartbeat_timeout)) or
      came before its failure.
  returned: when a node stopped answering
  type: dict
  sample: {gpu02: "2026-11-21T10:31:02+00:00"}
never_started:
  description: The nodes where no process of the run started within O(start_timeout), when that ended it.
  returned: when the run did not start on every node in time
  type: list
  elements: str
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
  sample: ["pid 4242 (python3 train.py)"]
survivors:
  description: Processes of a run still alive after SIGKILL (the module then fails).
  returned: when a process survived
  type: list
  elements: int
others:
  description:
    - Other accounts' runs announced on the run board and alive. With O(state=stopped), those on
      this node (never stopped, only shown); with O(state=started), when they refused the launch,
      on any node (with C(node)).
  returned: state=stopped; state=started when another account's run refused the launch
  type: list
  elements: dict
  contains:
    run_id:
      description: The other run's id.
      type: str
    account:
      description: The account that launched it (the owner of its board entry).
      type: str
    state:
      description: V(running) (a process of its account names it), or V(starting).
      type: str
    started:
      description: When it was launched (the launching head's clock, UTC).
      type: str
    world_size:
      description: Its world size at launch.
      type: int
queue:
  description:
    - With O(state=stopped) in check mode, every account's jobs in Slurm's queue as this node's
      C(squeue) lists them (C(job_id), C(name), C(user), C(state), C(submitted), C(torchfleet));
      empty where Slurm is not installed, and outside check mode.
  returned: state=stopped
  type: list
  elements: dict
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
jobs:
  description:
    - The Slurm jobs of the runs stopped, found by their name (the run id) and comment
      (C(torchfleet)) whatever their supervisor's state, and cancelled (C(scancel), retried); in
      check mode, those that would be. Empty where Slurm is not installed.
  returned: state=stopped
  type: list
  elements: dict
  contains:
    job_id:
      description: The job's id.
      type: str
    run_id:
      description: The run it belongs to.
      type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_option_specs import argument_spec
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_restart import run_restarted
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_start import run_started
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_stop import run_stopped

# Declared once, in the launch option table (module_utils/_launch_options.py).
ARGUMENT_SPEC = argument_spec()


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "started", ("nodes", "head", "script")), ("state", "restarted", ("run_id",))],
        supports_check_mode=True,
    )
    for name in ("launch_timeout", "start_timeout", "heartbeat_timeout", "silent_node_timeout", "stop_grace"):
        if module.params[name] < 0:
            module.fail_json(msg=f"{name} must be 0 or more seconds, got {module.params[name]}")
    if module.params["state"] == "stopped":
        run_stopped(module)
    elif module.params["state"] == "restarted":
        run_restarted(module)
    else:
        run_started(module)


if __name__ == "__main__":
    main()
