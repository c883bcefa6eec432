# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Written by tools/write_launch_options.py from the option table in
# plugins/module_utils/_launch_options.py: change the table and run that, never this file.
"""The torchrun_launch module's options, documented, from the launch option table that also
gives the module its argument spec; ansible-test's validate-modules checks the two agree."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    DOCUMENTATION = r"""
options:
  state:
    description:
      - V(started) launches a run and waits for it; V(stopped) stops runs on this node.
      - V(restarted) starts a run of O(log_dir) that failed, was lost, stopped or timed out
        (O(run_id)) again from its own request, as its next attempt, and waits for it (or detaches,
        O(detach)). The supervisor takes the nodes of the run that answer (O(min_nodes) of them,
        else the run's own), ends what is left of the run on them, and starts the run with a new
        rendezvous port and E(TORCHFLEET_RESTART_COUNT) set; the script resumes from its checkpoint.
        The run's secrets are never stored; give them again (O(env_secrets)). O(max_restarts) and
        O(min_nodes) replace the run's own when not 0. Not for Slurm or MPICH runs.
    type: str
    choices: [started, stopped, restarted]
    default: started
  nodes:
    description: The nodes of the run. Required with O(state=started).
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
        description: The network interface holding O(nodes[].address). Required with two or more
          nodes (NCCL and Gloo need it).
        type: str
  head:
    description: Name of the head node (one of O(nodes)); it runs rank 0 and hosts the rendezvous.
      The module must run on this node. Required with O(state=started).
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
      - V(torchrun) starts one C(torchrun) per node with Open MPI; V(rank) starts one Open MPI rank
        per slot running O(python) O(script); V(mpich) starts one C(torchrun) per node with MPICH's
        C(mpiexec), the flavour O(mpich_launcher) names.
      - With V(mpich) and MPICH's Hydra the head reaches every node over ssh, as with Open MPI, and
        the run has the same checks, records, stop, timeout and clean-up. What Hydra cannot do, and
        so V(mpich) mode does not do - C(log_dir) (Hydra's C(-outfile-pattern) replaces the output
        instead of copying it, so the per-node torchrun logs under C(workers) are the logs), the
        keepalive of O(silent_node_timeout) (a node gone silent ends the run only at
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
        HOSTFILE --envall); PALS starts the nodes' processes itself, so the module checks and cleans
        up only the head (set O(check_nodes=false)) and Ansible does it on the other nodes.
      - There is no default; the launch role passes what setup read from C(mpiexec --version) (fact
        C(mpich_found_launcher)), and O(mode=mpich) without it is refused.
    type: str
    choices: [hydra, pals]
  master_port:
    description: Rendezvous port on the head node (E(MASTER_PORT) in rank mode).
    type: int
    default: 29500
  nproc_per_node:
    description: Workers per node in V(torchrun) and V(mpich) modes; default the nodes'
      O(nodes[].slots), which must then be equal.
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
    description: Path of C(mpirun) or C(mpiexec) on the head; default V(mpirun), V(mpiexec) in mpich
      mode. Give the full path (setup records C(mpirun.openmpi) and C(mpiexec.hydra)) where Open MPI
      and MPICH share a node, as the plain names are alternatives either may hold.
    type: str
  network:
    description: The cluster network as a CIDR; Open MPI then uses it for its own traffic.
    type: str
  env_pass:
    description:
      - Names of variables forwarded from the module's environment on the head to every rank (C(-x
        NAME) for Open MPI; values never appear on a command line). Each name listed here must be
        set in the module's environment (use the task's C(environment)), or the module fails naming
        the missing ones.
      - In addition the module always forwards E(PATH), E(LD_LIBRARY_PATH) and every E(NCCL_*)
        variable that is set in its environment (only those set, and not those torchfleet sets
        itself or that O(env_set) or O(env_secrets) name).
    type: list
    elements: str
    default: []
  env_secrets:
    description: Secret variables, name to value (for example an API key read on the controller).
      The values go only into the launcher's environment and travel to the ranks by name; they are
      never on a command line, in the results or in logs the module writes.
    type: dict
    default: {}
  env_set:
    description: Variables set to these values on every rank.
    type: dict
    default: {}
  mpirun_extra_args:
    description: Extra launcher options. Options torchfleet controls (process counts, mapping,
      hostfile, binding, output files, environment, interface MCA parameters) are refused.
    type: list
    elements: str
    default: []
  torchrun_extra_args:
    description: "More options of torchrun on every node, each quoted as given, before the script.
      Refused: the options torchfleet sets (C(--nnodes), C(--node-rank), C(--nproc-per-node),
      C(--rdzv-*), C(--standalone), C(--log-dir), C(--redirects), C(--tee), C(--max-restarts):
      O(max_restarts) restarts a run), and any in O(mode=rank), which runs no torchrun."
    type: list
    elements: str
    default: []
  allow_run_as_root:
    description: Pass C(--allow-run-as-root) to Open MPI, which refuses root without it.
    type: bool
    default: false
  tree_spawn:
    description: Let Open MPI's daemons start further daemons over SSH. By default only the head
      holds the cluster's private key, so the head starts every daemon (C(plm_rsh_no_tree_spawn)).
    type: bool
    default: false
  bind_to:
    description: "How the launcher binds each process it starts: C(--bind-to) of Open MPI's mpirun,
      C(-bind-to) of MPICH's Hydra. V(none) leaves every core to every process. In torchrun and
      mpich modes the process bound is each node's torchrun, and its workers inherit the binding."
    type: str
    choices: [none, core, socket, numa]
    default: none
  share_nodes:
    description: Launch even where another account's torchfleet run is alive on the nodes. Every
      launch announces its run on the run board of each of its nodes (C(/var/lib/torchfleet/board),
      made by setup) before anything starts; V(false) refuses a launch onto nodes where another
      account's run is announced and alive, naming the run, its account, its start and world size.
    type: bool
    default: false
  log_dir:
    description: Directory on the head under which each run gets O(log_dir)/RUN_ID/, holding
      C(hostfile), C(launcher.log) (the launcher's stdout and stderr, each line tagged by Open MPI
      with the process that wrote it), C(ranks/) (Open MPI's per-rank files), C(workers/)
      (torchrun's per-worker files, written on every node under the same path), and the supervisor's
      C(state.json) (the run's record), C(run.json) (its plan, no secret in it), C(supervisor/) and
      C(supervisor.log). Nothing there is ever deleted by torchfleet.
    type: path
    default: ~/torchfleet/runs
  launch_timeout:
    description: Seconds the run may take; when they pass the run is stopped (TERM, then KILL after
      O(stop_grace)) and the module fails with RV(timed_out=true), naming the nodes that no longer
      answer C(ssh) from the head (RV(silent_nodes)). V(0) waits for ever.
    type: int
    default: 0
  start_timeout:
    description:
      - Seconds from the launcher's start to a process of the run (C(torchrun), or a rank) on every
        node the head checks. A launch past it never started somewhere (a node whose daemon cannot
        call back, a launcher waiting on a node), and its supervisor ends it, as a timed-out run is
        ended, and records it V(failed), naming the nodes where nothing started (RV(never_started)).
      - Not under O(scheduler=slurm), where a job may wait in the queue. V(0) waits for ever.
    type: int
    default: 180
  heartbeat_timeout:
    description:
      - Seconds a node may be silent before it is lost, which ends the attempt (or the run), naming
        that node as the cause (RV(lost_nodes)). The run's supervisor keeps one ssh session open to
        each other node, on which the node writes a beat every second. No beat for 3.5 s makes a
        node silent (several beats missed, not one slow one); silent for this many seconds, it is
        lost. A shorter silence (a switch failover, a spanning-tree change, a long pause of the
        node, a swap storm) is waited out, as mpirun and torchrun wait, and costs nothing. The
        default, 30 s, waits out the common blips of 10 to 30 s; a real loss costs at most that much
        more time.
      - A node whose processes are proven dead is acted on at once, without this wait. Its session
        closes (killed, out of memory, crashed, rebooted) and the node does not answer on its ssh
        port within 0.5 s, or answers with a new boot.
      - A run that fails while a node is silent names that node first, as the cause of the ranks
        elsewhere that failed after it.
      - Open MPI modes with O(check_nodes). V(0) leaves a silent node to O(silent_node_timeout).
    type: int
    default: 30
  hang_timeout:
    description:
      - Seconds a run may make no progress while every node is alive before it is hung. A rank makes
        progress when it writes to its output (any line, a carriage-return redraw of a progress
        bar); once a rank has printed the mark C(TORCHFLEET_STEP N) at a line's start, only a mark
        that changes its step is that rank's progress, so output at a frozen step (a logging thread)
        is not; a node silent or paused stops the clock (O(heartbeat_timeout) judges it). A hung
        attempt is ended, naming the ranks that stopped first (the lowest step marked, else the
        oldest progress), and restarted under O(max_restarts) on the same nodes; else the run ends
        V(hung) (exit code 123).
      - "V(auto) learns the timeout from the run: 3 times the longest gap seen between two progress
        of the run, and never under 600 s (NCCL's own watchdog default). Nothing is judged before
        the first progress (the start is O(start_timeout)'s). V(0) never judges. Other values are
        seconds, 10 or more. The ranks' files are read on their nodes: Open MPI modes with
        O(check_nodes)."
    type: str
    default: auto
  max_restarts:
    description:
      - Restart a run that failed for a reason a restart can help (a node lost or cut off, a rank
        killed by a signal, a rank's non-zero exit not in O(final_exit_codes)) up to this many
        times.
      - Each restart first ends everything of the attempt before on every node that answers, then
        starts the same request on the nodes that answer (at least O(min_nodes)), with a new
        rendezvous port and C(TORCHFLEET_RESTART_COUNT) set to the attempt's number, from which the
        script resumes from its checkpoint. A stop, Ctrl-C or O(launch_timeout) ends the whole run.
      - Under O(scheduler=slurm) a restart is a new job of as many nodes as answer, with
        C(--exclude) naming the Slurm nodes of the run that do not (needs O(check_nodes), as the
        supervisor asks the nodes over ssh). Refused with O(mode=mpich). V(0) never restarts.
    type: int
    default: 0
  min_nodes:
    description: The fewest nodes an attempt may use. Fewer answering, the supervisor waits up to
      O(restart_wait) seconds for lost nodes to come back (their stale processes are ended first),
      then ends the run V(failed), naming the nodes missing. V(0) means every node of the run.
    type: int
    default: 0
  restart_wait:
    description: Seconds a restart waits for O(min_nodes) nodes to answer.
    type: int
    default: 300
  spare_nodes:
    description:
      - Nodes of O(nodes) kept out of the world, the last ones (never O(head)), checked and given
        the script's files like the others. With O(max_restarts), a lost node is replaced by a spare
        in the next attempt, so the world size does not change; with no spare left the run shrinks
        (down to O(min_nodes)) or ends. A node back after a loss is a spare again once the world is
        whole.
      - Not under Slurm, where an attempt is an allocation of its own.
    type: int
    default: 0
  rejoin_after:
    description:
      - With O(max_restarts), where an attempt runs on fewer nodes than the run's world (a node
        lost, no spare for it), the seconds a lost node must keep answering, and pass the launch's
        checks again (its Python environment as setup installed it, its cluster interface as
        recorded, the script's files, no other run alive there), before the run grows back to it.
      - The supervisor ends the attempt right after the script's next checkpoint, which the script
        says with a line of rank 0's stdout that begins with C(TORCHFLEET_CHECKPOINT), and starts
        the next with every node back; growing spends nothing of O(max_restarts). A script that
        never says it is grown at its attempt's end instead (a failure it is restarted for). A node
        that fails a check is named in the record's C(not_taken_back).
    type: int
    default: 10
  fault_tolerance:
    description:
      - "V(none): one launcher across the nodes; a lost node ends the attempt (O(max_restarts)
        restarts it)."
      - "V(torchft): each node runs its own C(torchrun) (its own rendezvous on that node) as a
        torchft replica group, started over ssh and watched by the run's supervisor, with
        E(TORCHFT_LIGHTHOUSE), E(REPLICA_GROUP_ID) (the node's index) and E(NUM_REPLICA_GROUPS) set;
        the supervisor runs C(torchft_lighthouse) on the head at O(master_port), O(min_nodes) (at
        least 1) as its C(--min_replicas). A lost node ends no process on another node; a node back,
        or a group that failed by itself (O(max_restarts) a node), is started again alone and heals
        from a live peer. The run succeeds when every group left ends with 0, and fails when fewer
        than O(min_nodes) groups train for O(restart_wait) seconds. With O(spare_nodes), a spare
        runs a lost node's group at once (its E(REPLICA_GROUP_ID)), without O(max_restarts); the
        node back is a spare. Torchrun mode over ssh with two nodes or more; not with
        O(scheduler=slurm)."
    type: str
    choices: [none, torchft]
    default: none
  torchft_heartbeat_ms:
    description: "With O(fault_tolerance=torchft): the Lighthouse's C(--heartbeat_timeout_ms), how
      long a replica group's silence is waited for before the next quorum forms without it: what a
      killed node costs the others, about this long (docs/fault-tolerance.md). torchft's own default
      is 5000."
    type: int
    default: 1000
  final_exit_codes:
    description: Rank exit codes that end the run without a restart.
    type: list
    elements: int
    default: []
  silent_node_timeout:
    description:
      - Open MPI modes. Seconds after which a node that went silent (cut off from the network,
        powered off) ends the run. C(mpirun) gets TCP keepalive on its daemon connections
        (C(oob_tcp_keepalive_time), C(_intvl), C(_probes)), so it gives up the silent node's daemon
        and stops the run, the module fails naming that node (RV(failed_host)), and the daemon on
        the cut-off node, its connection to C(mpirun) lost, ends the ranks it started. The probes
        are answered by the node's kernel, so a busy or stalled rank does not count as silent.
      - V(0) leaves Open MPI's own settings, which give up a silent node after 480 s at best;
        O(launch_timeout) still bounds the run.
    type: int
    default: 120
  stop_grace:
    description: Seconds between SIGTERM and SIGKILL when a run is stopped.
    type: int
    default: 10
  chdir:
    description: The launcher's working directory on the head. Open MPI starts the ranks on the
      other nodes in the same directory when it exists there (else in the home directory), so
      relative paths in O(script_args) mean the same everywhere. Default, the module's own temporary
      directory.
    type: path
  file_contents:
    description: Files the run needs at the same path on every node (the script, its config), as
      paths mapped to base64 content; a leading C(~) is the training account's home. Before the
      start, the head hashes each node's copies and writes only the missing or different ones (whole
      or not at all, directories 0750, files 0640). Never shown in output.
    type: dict
    default: {}
  check_nodes:
    description: Before the start, check every other node from the head over C(ssh) as the running
      account, the way C(mpirun) reaches them, in parallel. A node that does not answer and an
      earlier run still alive there refuse the launch; missing or different O(file_contents) are
      sent. After a run that failed, what is left of it on every node is ended the same way. The
      check's connections stay open (OpenSSH masters in a C(/tmp/tf-ssh-*) directory of the running
      account, closed by the supervisor when the run ends) and C(mpirun) starts its daemons through
      them instead of a new handshake per node, unless O(tree_spawn) is set or O(mpirun_extra_args)
      or the environment set Open MPI's own C(plm_rsh_*) options (a C(plm_rsh_args) in an Open MPI
      parameter file is not seen, and the masters' option would override it, so give it in
      O(mpirun_extra_args) instead). V(false) checks the head alone (Cray PALS nodes, which
      C(mpiexec) reaches without C(ssh)); the clean-up on the other nodes is then the caller's
      (O(state=stopped) on each).
    type: bool
    default: true
  expect_packages:
    description: The packages (canonical name to version) that setup installed in the environment of
      O(python) on every node (the cached fact C(python_env_installed)). With O(check_nodes), the
      check before the start reads each node's environment (its distributions' metadata, no
      interpreter started) and refuses the launch when one differs, naming the node and the
      packages, before anything starts. Empty, no such check.
    type: dict
    default: {}
  detach:
    description: Return as soon as the run's processes (C(torchrun), or the ranks) run on every node
      the head checks (under O(scheduler=slurm), as soon as the job runs), with RV(state=running)
      and the run id, instead of waiting for its end. Every check that refuses a launch still
      refuses it first. Follow the run with C(torchfleet logs -f), C(torchfleet wait) or
      M(torchfleet.cluster.torchrun_run_info).
    type: bool
    default: false
  detach_when:
    description: With O(detach=true), when to return. V(running), once the run's processes run on
      every node (under O(scheduler=slurm), once the job runs). V(submitted), as soon as the
      supervisor holds the run (mpirun started, or the job submitted, pending or not), for a caller
      that follows the run itself, as C(torchfleet launch) does, printing Slurm's reason while the
      job waits.
    type: str
    choices: [running, submitted]
    default: running
  scheduler:
    description:
      - V(none) starts C(mpirun) on the head, which reaches the other nodes over C(ssh).
      - V(slurm) submits the run as a Slurm batch job with C(sbatch) on the head, as the account the
        module runs as. The job's script (C(job.sbatch) in the run's directory, written by the same
        code as C(torchfleet render --format slurm)) runs C(mpirun) inside the allocation, which
        starts its daemons through Slurm (C(--mca plm slurm)), never C(ssh). The job is named after
        the run id, its output is the run's C(launcher.log) (written on the job's first node, the
        head when the allocation starts with it, or any node with a shared home), and the supervisor
        follows it with C(scontrol) (RV(job_id), Slurm's reason while it is pending, its exit code).
        Stopping the run, and O(launch_timeout), call C(scancel). O(mode=mpich) and O(tree_spawn)
        cannot run under it and are refused, as are a head without C(sbatch), an unknown or down
        partition, a partition with fewer nodes than O(nodes), and a time limit Slurm would reject,
        before anything is submitted.
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
    description: With O(scheduler=slurm), the job's time limit (C(--time)) in a form C(sbatch)
      accepts (V(90), V(01:30:00), V(1-00:00:00)); at most the partition's. Default the partition's.
    type: str
  slurm_gpus_per_node:
    description: With O(scheduler=slurm), GPUs per node requested as Slurm GRES
      (C(--gpus-per-node)); unset, none are requested (a cluster whose GPUs are not GRES gives them
      to every job).
    type: int
  slurm_extra_args:
    description: With O(scheduler=slurm), the site's own C(sbatch) options (qos, constraint,
      reservation), each item one option as C(--option=value), written into the batch script's
      header.
    type: list
    elements: str
    default: []
  batch_whole_nodes:
    description:
      - With O(scheduler=slurm), take whole nodes (C(--exclusive --mem=0)), so that a node's GPU
        workers and their data loaders have every CPU and all memory of it where the site enforces
        cgroups.
      - V(false) asks for one task's share of each node.
    type: bool
    default: true
"""
