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
      - V(restarted) starts a run of O(log_dir) that failed, was lost, stopped or timed out
        (O(run_id)) again from its own request, as its next attempt, and waits for it (or
        detaches, O(detach)). The supervisor takes the nodes of the run that answer (O(min_nodes)
        of them, else the run's own), ends what is left of the run on them, and starts the run
        with a new rendezvous port and E(TORCHFLEET_RESTART_COUNT) set; the script resumes from its
        checkpoint. The run's secrets are never stored; give them again (O(env_secrets)).
        O(max_restarts) and O(min_nodes) replace the run's own when not 0. Not for Slurm or
        MPICH runs.
    type: str
    choices: [started, stopped, restarted]
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
      - With O(state=restarted), the run to start again (required).
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
  heartbeat_timeout:
    description:
      - Seconds a node may be silent before it is lost, which ends the attempt (or the run),
        naming that node as the cause (RV(lost_nodes)). The run's supervisor keeps one ssh session
        open to each other node, on which the node writes a beat every second. No beat for 3.5 s
        makes a node silent (several beats missed, not one slow one); silent for this many
        seconds, it is lost. A shorter silence (a switch failover, a spanning-tree change, a long
        pause of the node, a swap storm) is waited out, as mpirun and torchrun wait, and costs
        nothing. The default, 30 s, waits out the common blips of 10 to 30 s; a real loss costs
        at most that much more time.
      - A node whose processes are proven dead is acted on at once, without this wait. Its session
        closes (killed, out of memory, crashed, rebooted) and the node does not answer on its ssh
        port within 0.5 s, or answers with a new boot.
      - A run that fails while a node is silent names that node first, as the cause of the ranks
        elsewhere that failed after it.
      - Open MPI modes with O(check_nodes). V(0) leaves a silent node to O(silent_node_timeout).
    type: int
    default: 30
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
  start_timeout:
    description:
      - Seconds from the launcher's start to a process of the run (C(torchrun), or a rank) on every
        node the head checks. A launch past it never started somewhere (a node whose daemon cannot
        call back, a launcher waiting on a node), and its supervisor ends it, as a timed-out run is
        ended, and records it V(failed), naming the nodes where nothing started (RV(never_started)).
      - Not under O(scheduler=slurm), where a job may wait in the queue. V(0) waits for ever.
    type: int
    default: 180
  max_restarts:
    description:
      - Restart a run that failed for a reason a restart can help (a node lost or cut off, a rank
        killed by a signal, a rank's non-zero exit not in O(final_exit_codes)) up to this many times.
      - Each restart first ends everything of the attempt before on every node that answers, then
        starts the same request on the nodes that answer (at least O(min_nodes)), with a new
        rendezvous port and C(TORCHFLEET_RESTART_COUNT) set to the attempt's number, from which the
        script resumes from its checkpoint. A stop, Ctrl-C or O(launch_timeout) ends the whole run.
      - Under O(scheduler=slurm) a restart is a new job of as many nodes as answer, with C(--exclude)
        naming the Slurm nodes of the run that do not (needs O(check_nodes), as the supervisor asks
        the nodes over ssh). Refused with O(mode=mpich). V(0) never restarts.
    type: int
    default: 0
  min_nodes:
    description:
      - The fewest nodes an attempt may use. Fewer answering, the supervisor waits up to
        O(restart_wait) seconds for lost nodes to come back (their stale processes are ended first),
        then ends the run V(failed), naming the nodes missing. V(0) means every node of the run.
    type: int
    default: 0
  restart_wait:
    description: Seconds a restart waits for O(min_nodes) nodes to answer.
    type: int
    default: 300
  share_nodes:
    description:
      - Launch even where another account's torchfleet run is alive on the nodes. Every launch
        announces its run on the run board of each of its nodes (C(/var/lib/torchfleet/board), made
        by setup) before anything starts; V(false) refuses a launch onto nodes where another
        account's run is announced and alive, naming the run, its account, its start and world size.
    type: bool
    default: false
  spare_nodes:
    description:
      - Nodes of O(nodes) kept out of the world, the last ones (never O(head)), checked and given the
        script's files like the others. With O(max_restarts), a lost node is replaced by a spare in
        the next attempt, so the world size does not change; with no spare left the run shrinks (down
        to O(min_nodes)) or ends. A node back after a loss is a spare again once the world is whole.
      - Not under Slurm, where an attempt is an allocation of its own.
    type: int
    default: 0
  rejoin_after:
    description:
      - With O(max_restarts), where an attempt runs on fewer nodes than the run's world (a node lost,
        no spare for it), the seconds a lost node must keep answering, and pass the launch's checks again
        (its Python environment as setup installed it, its cluster interface as recorded, the script's
        files, no other run alive there), before the run grows back to it.
      - The supervisor ends the attempt right after the script's next checkpoint, which the script
        says with a line of rank 0's stdout that begins with C(TORCHFLEET_CHECKPOINT), and starts the
        next with every node back; growing spends nothing of O(max_restarts). A script that never
        says it is grown at its attempt's end instead (a failure it is restarted for). A node that
        fails a check is named in the record's C(not_taken_back).
    type: int
    default: 10
  final_exit_codes:
    description: Rank exit codes that end the run without a restart.
    type: list
    elements: int
    default: []
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
  slurm_extra_args:
    description:
      - With O(scheduler=slurm), the site's own C(sbatch) options (qos, constraint, reservation), each
        item one option as C(--option=value), written into the batch script's header.
    type: list
    elements: str
    default: []
  batch_whole_nodes:
    description:
      - With O(scheduler=slurm), take whole nodes (C(--exclusive --mem=0)), so that a node's GPU workers
        and their data loaders have every CPU and all memory of it where the site enforces cgroups.
      - V(false) asks for one task's share of each node.
    type: bool
    default: true
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
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_options import argument_spec
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
