# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The launch options, each declared once: the table (``OPTIONS``; what a row says:
_launch_option_schema.py).

From it come the module's and the role's specs, the module's documentation, run.yml's arguments
and launch.yml's names (_launch_option_specs.py; ``tools/write_launch_options.py`` writes the
files, and ``make check`` fails when they are out of date), and the typed launch request
(_on_node/launch_request.LaunchRequest: a field per module option, at its default). The checks are in
_launch_checks.py.

Standard library only: the CLI imports this file outside Ansible.
"""

from __future__ import annotations

from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_option_schema import Option
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import DEFAULT_PORT, FAULT_TOLERANCE, MODES
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launchers import MPICH_LAUNCHERS

# The module's nodes, one dict each (the launch_nodes filter makes them from setup's facts).
NODE_OPTIONS = (
    Option("name", "str", "Inventory name of the node, used in messages and results.", required=True, role=None),
    Option("address", "str", "The node's address on the cluster network; it goes into the hostfile.",
           required=True, role=None),
    Option("slots", "int", "Workers (GPUs) on the node.", required=True, role=None),
    Option("interface", "str", "The network interface holding O(nodes[].address). Required with two or more "
           "nodes (NCCL and Gloo need it).", role=None),
)


OPTIONS: tuple[Option, ...] = (
    # The module's own inputs, from the role's resolution of the inventory and setup's facts.
    Option("state", "str",
           ("V(started) launches a run and waits for it; V(stopped) stops runs on this node.",
            "V(restarted) starts a run of O(log_dir) that failed, was lost, stopped or timed out (O(run_id)) "
            "again from its own request, as its next attempt, and waits for it (or detaches, O(detach)). The "
            "supervisor takes the nodes of the run that answer (O(min_nodes) of them, else the run's own), ends "
            "what is left of the run on them, and starts the run with a new rendezvous port and "
            "E(TORCHFLEET_RESTART_COUNT) set; the script resumes from its checkpoint. The run's secrets are never "
            "stored; give them again (O(env_secrets)). O(max_restarts) and O(min_nodes) replace the run's own "
            "when not 0. Not for Slurm or MPICH runs."),
           default="started", choices=("started", "stopped", "restarted"), role=None,
           module_value="started"),
    Option("nodes", "list", "The nodes of the run. Required with O(state=started).", elements="dict",
           role=None, suboptions=NODE_OPTIONS,
           module_value=(
               "{{ _launch_run_nodes | map('extract', hostvars)\n"
               "   | torchfleet.cluster.launch_nodes(launch_nproc_per_node) }}")),
    Option("head", "str",
           ("Name of the head node (one of O(nodes)); it runs rank 0 and hosts the rendezvous. The module must "
            "run on this node. Required with O(state=started)."), role=None,
           module_value="{{ launch_head }}"),
    Option("action", "str", "Start a run, stop the runs on every node, or restart a run that ended "
           "(run_id) from its own request.", module=False, default="start", choices=("start", "stop", "restart")),
    Option("script", "path", "The training script (on the controller; on the nodes with shared_storage).",
           role_type="str", role_default="", short="script",
           module_doc="The training script's path on the nodes. Required with O(state=started).",
           module_value="{{ _launch_resolved.script }}"),  # run.yml's task variable: _launch_resolution.resolved
    Option("script_args", "list", "Arguments passed to every rank exactly as given.", default=[],
           elements="str", short="script_args",
           module_doc="Arguments for the script; they reach it on every rank exactly as given.", example=("--epochs", "3")),
    Option("files", "list", "More files on the controller that the script needs, copied beside it "
           "(16 MiB in all with the script: code and configuration, not data).", module=False,
           default=[], elements="str", short="files", example=("data.csv",)),
    Option("shared_storage", "bool", "The nodes see the script at that path already; copy nothing.",
           module=False, default=False, short="shared_storage"),
    Option("run_id", "str", "The run's id (made when empty); with action stop, only this run.",
           role_default="", short="run_id",
           module_doc=(
               "With O(state=started), the id of this run, 1 to 64 characters from letters, digits, V(_), V(.) and "
               "V(-). When omitted one is made, like V(tf-20261121-101502-ab12cd).",
               "With O(state=stopped), stop only this run; when omitted, every run on the node.",
               "With O(state=restarted), the run to start again (required)."),
           module_value="{{ launch_run_id or omit }}", also_for=("restarted", "stopped")),
    Option("mode", "str", "torchrun (one torchrun per node) or rank (one MPI rank per worker) with "
           "Open MPI, or mpich (one torchrun per node with MPICH's mpiexec).", default="torchrun",
           choices=MODES,
           module_doc=(
               "V(torchrun) starts one C(torchrun) per node with Open MPI; V(rank) starts one Open MPI rank per slot "
               "running O(python) O(script); V(mpich) starts one C(torchrun) per node with MPICH's C(mpiexec), the "
               "flavour O(mpich_launcher) names.",
               "With V(mpich) and MPICH's Hydra the head reaches every node over ssh, as with Open MPI, and the run "
               "has the same checks, records, stop, timeout and clean-up. What Hydra cannot do, and so V(mpich) mode "
               "does not do - C(log_dir) (Hydra's C(-outfile-pattern) replaces the output instead of copying it, so "
               "the per-node torchrun logs under C(workers) are the logs), the keepalive of O(silent_node_timeout) "
               "(a node gone silent ends the run only at O(launch_timeout)), O(tree_spawn), O(scheduler=slurm), the "
               "ssh connections the probe opened (Hydra takes no ssh options). A process killed by a signal N is "
               "reported as 128+N from torchrun's summary or Hydra's C(EXIT STRING); C(mpiexec)'s own exit status is "
               "N.")),
    Option("mpich_launcher", "str", "With mode mpich, which mpiexec runs: hydra (MPICH's Hydra, Intel "
           "MPI) or pals (HPE Cray PALS); default what setup read from mpiexec --version.",
           choices=MPICH_LAUNCHERS, role_choices=(),
           role_default="",
           short="mpich_launcher",
           module_doc=(
               "With O(mode=mpich), which C(mpiexec) O(launcher) is. V(hydra) is MPICH's Hydra (also Intel MPI's), "
               "started with C(-launcher ssh -ppn 1 -f HOSTFILE -bind-to none -genvall -iface IF -prepend-rank). "
               "V(pals) is HPE Cray PALS, started with C(--ppn 1 --cpu-bind none --hostfile HOSTFILE --envall); PALS "
               "starts the nodes' processes itself, so the module checks and cleans up only the head (set "
               "O(check_nodes=false)) and Ansible does it on the other nodes.",
               "There is no default; the launch role passes what setup read from C(mpiexec --version) (fact "
               "C(mpich_found_launcher)), and O(mode=mpich) without it is refused."),
           module_value="{{ _launch_resolved.mpich_launcher or omit }}"),
    Option("master_port", "int", "Rendezvous port on the head node, a number from 1024 to 65535.",
           default=DEFAULT_PORT, role_type="raw", short="master_port",
           module_doc="Rendezvous port on the head node (E(MASTER_PORT) in rank mode)."),
    Option("nproc_per_node", "int", "Workers per node: auto (the GPU count setup found, 1 without GPUs) "
           "or a number, the same on every node.", role_type="raw", role_default="auto",
           short="nproc_per_node",
           module_doc=(
               "Workers per node in V(torchrun) and V(mpich) modes; default the nodes' O(nodes[].slots), which must "
               "then be equal."),
           module_value=None),  # run.yml hands it over inside nodes: each node's slots
    Option("python", "str", "Python interpreter on the nodes (rank mode).", default="python3", role=None,
           module_value="{{ _launch_resolved.python }}"),
    Option("torchrun", "str", "C(torchrun) on the nodes (torchrun and mpich modes).", default="torchrun",
           role=None,
           module_value="{{ _launch_resolved.torchrun or omit }}"),
    Option("launcher", "str",
           ("Path of C(mpirun) or C(mpiexec) on the head; default V(mpirun), V(mpiexec) in mpich mode. Give the "
            "full path (setup records C(mpirun.openmpi) and C(mpiexec.hydra)) where Open MPI and MPICH share a "
            "node, as the plain names are alternatives either may hold."), role=None,
           module_value="{{ _launch_resolved.launcher or omit }}"),
    Option("network", "str", "The cluster network as a CIDR; Open MPI then uses it for its own traffic.", role=None),
    Option("env_pass", "list", "Environment names passed to every rank (PATH, LD_LIBRARY_PATH and "
           "NCCL_* when set).", default=[], elements="str", no_log=False, short="env_pass",
           module_doc=(
               "Names of variables forwarded from the module's environment on the head to every rank (C(-x NAME) for "
               "Open MPI; values never appear on a command line). Each name listed here must be set in the module's "
               "environment (use the task's C(environment)), or the module fails naming the missing ones.",
               "In addition the module always forwards E(PATH), E(LD_LIBRARY_PATH) and every E(NCCL_*) variable that "
               "is set in its environment (only those set, and not those torchfleet sets itself or that O(env_set) "
               "or O(env_secrets) name)."), example=("NCCL_DEBUG",)),
    Option("env_secrets", "dict", "Names of secrets read from the controller's environment and passed "
           "to every rank, never printed.", default={}, no_log=True, role_type="list", role_default=[],
           role_elements="str", short="env_secrets",
           module_doc=(
               "Secret variables, name to value (for example an API key read on the controller). The values go only "
               "into the launcher's environment and travel to the ranks by name; they are never on a command line, "
               "in the results or in logs the module writes."),
           module_value="{{ dict(launch_env_secrets | zip(query('ansible.builtin.env', *launch_env_secrets))) }}",
           module_note="Read from the controller's environment, here and nowhere else.", example=("WANDB_API_KEY",),
           also_for=("restarted",)),
    Option("env_set", "dict", "Values set for every rank.", default={}, short="env_set",
           module_doc="Variables set to these values on every rank."),
    Option("mpirun_extra_args", "list", "More launcher options, each option and each value an item of "
           "its own; those torchfleet controls, and shell characters, are refused.", default=[],
           elements="str", short="mpirun_extra_args",
           module_doc=(
               "Extra launcher options. Options torchfleet controls (process counts, mapping, hostfile, binding, "
               "output files, environment, interface MCA parameters) are refused."),
           example=("--mca", "btl_tcp_links", "2")),
    Option("torchrun_extra_args", "list", "More torchrun options on every node (torchrun and mpich modes), each "
           "option and each value an item of its own, such as --monitor-interval=1 or --local-ranks-filter=0; "
           "those torchfleet sets (nodes, node rank, workers per node, rendezvous, logs, restarts) are refused.",
           default=[], elements="str", short="torchrun_extra_args", example=("--monitor-interval=1",),
           module_doc=(
               "More options of torchrun on every node, each quoted as given, before the script. Refused: the "
               "options torchfleet sets (C(--nnodes), C(--node-rank), C(--nproc-per-node), C(--rdzv-*), "
               "C(--standalone), C(--log-dir), C(--redirects), C(--tee), C(--max-restarts): O(max_restarts) "
               "restarts a run), and any in O(mode=rank), which runs no torchrun.")),
    Option("allow_run_as_root", "bool", "Pass C(--allow-run-as-root) to Open MPI, which refuses root without it.",
           default=False, role=None, module_value="{{ _launch_resolved.allow_run_as_root }}"),
    Option("tree_spawn", "bool", "Let Open MPI's daemons start further daemons over ssh (hundreds of "
           "nodes); every node must then hold the cluster's private key.", default=False,
           short="tree_spawn",
           module_doc=(
               "Let Open MPI's daemons start further daemons over SSH. By default only the head holds the cluster's "
               "private key, so the head starts every daemon (C(plm_rsh_no_tree_spawn)).")),
    Option("bind_to", "str", "How mpirun binds each process it starts to the node's cores (mpirun's "
           "--bind-to, MPICH Hydra's -bind-to): none (every core free to every process), core, socket or numa. "
           "In torchrun and mpich modes that process is the node's torchrun, whose workers inherit its binding; "
           "core is for rank mode. Through Cray PALS, none alone.", default="none", choices=("none", "core", "socket", "numa"), short="bind_to",
           cli=(("launch", "bind each process mpirun starts: none (default), core, socket or numa"),),
           module_doc=(
               "How the launcher binds each process it starts: C(--bind-to) of Open MPI's mpirun, C(-bind-to) of "
               "MPICH's Hydra. V(none) leaves every core to every process. In torchrun and mpich modes the process "
               "bound is each node's torchrun, and its workers inherit the binding.")),
    Option("share_nodes", "bool", "Launch even where another account's torchfleet run is alive on the "
           "nodes (the run board, set up on every node); false refuses such a launch, naming that run.",
           default=False, short="share_nodes",
           module_doc=(
               "Launch even where another account's torchfleet run is alive on the nodes. Every launch announces its "
               "run on the run board of each of its nodes (C(/var/lib/torchfleet/board), made by setup) before "
               "anything starts; V(false) refuses a launch onto nodes where another account's run is announced and "
               "alive, naming the run, its account, its start and world size."),
           cli=(("launch", "launch even where another account's torchfleet run is alive on the nodes "
                 "(refused by default, naming that run)"),)),
    Option("workdir", "str", "The training account's directory for torchfleet on the nodes (setup's "
           "cluster_user_workdir).", module=False, default="~/torchfleet", short="cluster_user_workdir"),
    Option("log_dir", "path", "Directory on the nodes holding one directory of logs per run; absolute, "
           "or under ~ (default workdir/runs).", default="~/torchfleet/runs", role_type="str",
           role_default="{{ launch_workdir }}/runs", short="log_dir",
           module_doc=(
               "Directory on the head under which each run gets O(log_dir)/RUN_ID/, holding C(hostfile), "
               "C(launcher.log) (the launcher's stdout and stderr, each line tagged by Open MPI with the process "
               "that wrote it), C(ranks/) (Open MPI's per-rank files), C(workers/) (torchrun's per-worker files, "
               "written on every node under the same path), and the supervisor's C(state.json) (the run's record), "
               "C(run.json) (its plan, no secret in it), C(supervisor/) and C(supervisor.log). Nothing there is ever "
               "deleted by torchfleet."), also_for=("restarted",)),
    Option("script_dir", "str", "Where scripts are copied on the nodes, the run's working directory "
           "(default workdir/scripts).", module=False, role_default="{{ launch_workdir }}/scripts"),
    Option("launch_timeout", "int", "Seconds after which the run is stopped; 0 for no limit.", default=0,
           module_doc=(
               "Seconds the run may take; when they pass the run is stopped (TERM, then KILL after O(stop_grace)) "
               "and the module fails with RV(timed_out=true), naming the nodes that no longer answer C(ssh) from the "
               "head (RV(silent_nodes)). V(0) waits for ever.")),
    Option("start_timeout", "int", "Seconds from the launcher's start to a process of the run on every "
           "node; a launch past it is ended, naming the nodes where none started. 0 for no limit.",
           default=180,
           module_doc=(
               "Seconds from the launcher's start to a process of the run (C(torchrun), or a rank) on every node the "
               "head checks. A launch past it never started somewhere (a node whose daemon cannot call back, a "
               "launcher waiting on a node), and its supervisor ends it, as a timed-out run is ended, and records it "
               "V(failed), naming the nodes where nothing started (RV(never_started)).",
               "Not under O(scheduler=slurm), where a job may wait in the queue. V(0) waits for ever.")),
    Option("heartbeat_timeout", "int", "Seconds a node may be silent (no beat from it over its ssh session "
           "with the head) before it is lost, which ends the attempt, naming it; a node whose session closes "
           "and that no longer answers (killed, crashed, rebooted) is acted on at once. Shorter silences (a "
           "network blip, a pause) are waited out, as mpirun and torchrun wait; 0 leaves a silent node to "
           "silent_node_timeout.", default=30,
           module_doc=(
               "Seconds a node may be silent before it is lost, which ends the attempt (or the run), naming that "
               "node as the cause (RV(lost_nodes)). The run's supervisor keeps one ssh session open to each other "
               "node, on which the node writes a beat every second. No beat for 3.5 s makes a node silent (several "
               "beats missed, not one slow one); silent for this many seconds, it is lost. A shorter silence (a "
               "switch failover, a spanning-tree change, a long pause of the node, a swap storm) is waited out, as "
               "mpirun and torchrun wait, and costs nothing. The default, 30 s, waits out the common blips of 10 to "
               "30 s; a real loss costs at most that much more time.",
               "A node whose processes are proven dead is acted on at once, without this wait. Its session closes "
               "(killed, out of memory, crashed, rebooted) and the node does not answer on its ssh port within 0.5 "
               "s, or answers with a new boot.",
               "A run that fails while a node is silent names that node first, as the cause of the ranks elsewhere "
               "that failed after it.",
               "Open MPI modes with O(check_nodes). V(0) leaves a silent node to O(silent_node_timeout).")),
    Option("hang_timeout", "str", "Seconds a run may make no progress (no rank writes any output or, for a "
           "rank that marks its steps, no TORCHFLEET_STEP mark of it moves) while its nodes are alive before it is hung: its attempt is ended and "
           "restarted under max_restarts, else the run ends hung. auto learns it from the run (3 times the "
           "longest gap seen between progress, at least 10 minutes); 0 never.", default="auto",
           short="hang_timeout",
           module_doc=(
               "Seconds a run may make no progress while every node is alive before it is hung. A rank makes "
               "progress when it writes to its output (any line, a carriage-return redraw of a progress bar); once "
               "a rank has printed the mark C(TORCHFLEET_STEP N) at a line's start, only a mark that changes its "
               "step is that rank's progress, so output at a frozen step (a logging thread) is not; a node silent or paused stops the clock "
               "(O(heartbeat_timeout) judges it). A hung attempt is ended, naming the ranks that stopped first "
               "(the lowest step marked, else the oldest progress), and restarted under O(max_restarts) on the "
               "same nodes; else the run ends V(hung) (exit code 123).",
               "V(auto) learns the timeout from the run: 3 times the longest gap seen between two progress of the "
               "run, and never under 600 s (NCCL's own watchdog default). Nothing is judged before the first "
               "progress (the start is O(start_timeout)'s). V(0) never judges. Other values are seconds, 10 or "
               "more. The ranks' files are read on their nodes: Open MPI modes with O(check_nodes)."),
           cli=(("launch", "seconds without progress before the run is hung (default: auto, learned; 0: never)"),)),
    Option("max_restarts", "int", "Restart a run that failed for a reason a restart can help (a node lost "
           "or cut off, a rank killed by a signal, a rank's non-zero exit not in final_exit_codes) up to "
           "this many times, on the nodes that answer, each attempt with TORCHFLEET_RESTART_COUNT set; 0 "
           "never restarts. Open MPI modes, over ssh or under Slurm (a new job, without the nodes lost).", default=0, role_type="raw", short="max_restarts",
           module_doc=(
               "Restart a run that failed for a reason a restart can help (a node lost or cut off, a rank killed by "
               "a signal, a rank's non-zero exit not in O(final_exit_codes)) up to this many times.",
               "Each restart first ends everything of the attempt before on every node that answers, then starts the "
               "same request on the nodes that answer (at least O(min_nodes)), with a new rendezvous port and "
               "C(TORCHFLEET_RESTART_COUNT) set to the attempt's number, from which the script resumes from its "
               "checkpoint. A stop, Ctrl-C or O(launch_timeout) ends the whole run.",
               "Under O(scheduler=slurm) a restart is a new job of as many nodes as answer, with C(--exclude) naming "
               "the Slurm nodes of the run that do not (needs O(check_nodes), as the supervisor asks the nodes over "
               "ssh). Refused with O(mode=mpich). V(0) never restarts."),
           module_value="{{ launch_max_restarts | int }}",
           cli=(("launch", "restart the run up to N times after a node is lost or a rank fails, on the nodes that "
                 "answer; the script resumes from its checkpoint"),
                ("restart", "from now on, restart it up to N times by itself (default: as launched)")), also_for=("restarted",)),
    Option("min_nodes", "int", "The fewest nodes an attempt may use; fewer answering, the supervisor "
           "waits restart_wait seconds for lost nodes to come back, then ends the run. 0: every node of "
           "the run.", default=0, role_type="raw", short="min_nodes",
           module_doc=(
               "The fewest nodes an attempt may use. Fewer answering, the supervisor waits up to O(restart_wait) "
               "seconds for lost nodes to come back (their stale processes are ended first), then ends the run "
               "V(failed), naming the nodes missing. V(0) means every node of the run."),
           module_value="{{ launch_min_nodes | int }}",
           cli=(("launch", "with --max-restarts: the fewest nodes an attempt may use (default: all)"),
                ("restart", "the fewest nodes the attempt may use (default: as launched)")), also_for=("restarted",)),
    Option("restart_wait", "int", "Seconds a restart waits for min_nodes nodes to answer.", default=300,
           role_type="raw", short="restart_wait",
           module_doc="Seconds a restart waits for O(min_nodes) nodes to answer.",
           module_value="{{ launch_restart_wait | int }}"),
    Option("spare_nodes", "int", "Nodes of the group kept out of the world (the last ones, never the head), "
           "set up and checked like the others: with max_restarts, a lost node is replaced by a spare in the "
           "next attempt, so the world size does not change. No spare left, the run shrinks (down to min_nodes) "
           "or ends. Not under Slurm.", default=0, role_type="raw", short="spare_nodes",
           module_doc=(
               "Nodes of O(nodes) kept out of the world, the last ones (never O(head)), checked and given the "
               "script's files like the others. With O(max_restarts), a lost node is replaced by a spare in the next "
               "attempt, so the world size does not change; with no spare left the run shrinks (down to "
               "O(min_nodes)) or ends. A node back after a loss is a spare again once the world is whole.",
               "Not under Slurm, where an attempt is an allocation of its own."),
           module_value="{{ launch_spare_nodes | int }}",
           cli=(("launch", "with --max-restarts: keep the group's last N nodes out of the world, ready to "
                 "replace a lost node so the world size does not change"),)),
    Option("rejoin_after", "int", "With max_restarts: seconds a node lost earlier must keep answering (and pass "
           "the launch's checks) before the run grows back to it, right after the script's next checkpoint "
           "(a line of rank 0's stdout that begins with TORCHFLEET_CHECKPOINT).", default=10, role_type="raw",
           short="rejoin_after",
           module_doc=(
               "With O(max_restarts), where an attempt runs on fewer nodes than the run's world (a node lost, no "
               "spare for it), the seconds a lost node must keep answering, and pass the launch's checks again (its "
               "Python environment as setup installed it, its cluster interface as recorded, the script's files, no "
               "other run alive there), before the run grows back to it.",
               "The supervisor ends the attempt right after the script's next checkpoint, which the script says with "
               "a line of rank 0's stdout that begins with C(TORCHFLEET_CHECKPOINT), and starts the next with every "
               "node back; growing spends nothing of O(max_restarts). A script that never says it is grown at its "
               "attempt's end instead (a failure it is restarted for). A node that fails a check is named in the "
               "record's C(not_taken_back)."),
           module_value="{{ launch_rejoin_after | int }}"),
    Option("fault_tolerance", "str", "How the run survives a lost node: none restarts the run (max_restarts); "
           "torchft runs one torchrun a node as a torchft replica group beside a Lighthouse on the head, so the "
           "other nodes train on and a node back heals from a live peer (the script uses torchft; setup with "
           "fault_tolerance=torchft).", default="none", choices=FAULT_TOLERANCE, short="fault_tolerance",
           cli=(("launch", "torchft: one replica group a node (the script uses torchft's Manager); a lost node stops "
                 "nobody, and heals from a live peer when back (docs/fault-tolerance.md)"),),
           module_doc=(
               "V(none): one launcher across the nodes; a lost node ends the attempt (O(max_restarts) restarts it).",
               "V(torchft): each node runs its own C(torchrun) (its own rendezvous on that node) as a torchft replica "
               "group, started over ssh and watched by the run's supervisor, with E(TORCHFT_LIGHTHOUSE), "
               "E(REPLICA_GROUP_ID) (the node's index) and E(NUM_REPLICA_GROUPS) set; the supervisor runs "
               "C(torchft_lighthouse) on the head at O(master_port), O(min_nodes) (at least 1) as its "
               "C(--min_replicas). A lost node ends no process on another node; a node back, or a group that failed "
               "by itself (O(max_restarts) a node), is started again alone and heals from a live peer. The run "
               "succeeds when every group left ends with 0, and fails when fewer than O(min_nodes) groups train for "
               "O(restart_wait) seconds. With O(spare_nodes), a spare runs a lost node's group at once (its "
               "E(REPLICA_GROUP_ID)), without O(max_restarts); the node back is a spare. Torchrun mode over ssh with "
               "two nodes or more; not with O(scheduler=slurm).")),
    Option("torchft_heartbeat_ms", "int", "With fault_tolerance torchft: milliseconds the Lighthouse waits for a "
           "replica group's heartbeat before it forms the quorum without it (what a killed node costs the others).",
           default=1000, role_type="raw", short="torchft_heartbeat_ms",
           module_doc=(
               "With O(fault_tolerance=torchft): the Lighthouse's C(--heartbeat_timeout_ms), how long a replica "
               "group's silence is waited for before the next quorum forms without it: what a killed node costs the "
               "others, about this long (docs/fault-tolerance.md). torchft's own default is 5000."),
           module_value="{{ launch_torchft_heartbeat_ms | int }}"),
    Option("final_exit_codes", "list", "Rank exit codes that end the run without a restart (the script "
           "saying its failure is its own: bad input, a diverged loss).", default=[], elements="int",
           role_elements="raw", short="final_exit_codes",
           module_doc="Rank exit codes that end the run without a restart.",
           module_value="{{ launch_final_exit_codes | map('int') | list }}"),
    Option("silent_node_timeout", "int", "Open MPI modes: seconds after which a node gone silent (off "
           "the network, powered off) ends the run, named; 0 leaves Open MPI's keepalive (480 s at "
           "best).", default=120,
           module_doc=(
               "Open MPI modes. Seconds after which a node that went silent (cut off from the network, powered off) "
               "ends the run. C(mpirun) gets TCP keepalive on its daemon connections (C(oob_tcp_keepalive_time), "
               "C(_intvl), C(_probes)), so it gives up the silent node's daemon and stops the run, the module fails "
               "naming that node (RV(failed_host)), and the daemon on the cut-off node, its connection to C(mpirun) "
               "lost, ends the ranks it started. The probes are answered by the node's kernel, so a busy or stalled "
               "rank does not count as silent.",
               "V(0) leaves Open MPI's own settings, which give up a silent node after 480 s at best; "
               "O(launch_timeout) still bounds the run.")),
    Option("stop_grace", "int", "Seconds between TERM and KILL when a run is stopped.", default=10,
           module_doc="Seconds between SIGTERM and SIGKILL when a run is stopped.", also_for=("stopped",)),
    Option("chdir", "path",
           ("The launcher's working directory on the head. Open MPI starts the ranks on the other nodes in the "
            "same directory when it exists there (else in the home directory), so relative paths in "
            "O(script_args) mean the same everywhere. Default, the module's own temporary directory."),
           role=None, module_value="{{ _launch_resolved.chdir }}"),
    Option("file_contents", "dict",
           ("Files the run needs at the same path on every node (the script, its config), as paths mapped to "
            "base64 content; a leading C(~) is the training account's home. Before the start, the head hashes "
            "each node's copies and writes only the missing or different ones (whole or not at all, directories "
            "0750, files 0640). Never shown in output."), default={}, no_log=True, role=None,
           module_value=(
               "{{ {} if launch_shared_storage | bool or not _launch_resolved.check_nodes else\n"
               "   dict(([launch_script] + launch_files) | map('basename') | map('regex_replace', '^', "
               "launch_script_dir ~ '/')\n"
               "        | zip(([launch_script] + launch_files) | map('torchfleet.cluster.file_b64'))) }}")),
    Option("check_nodes", "bool",
           ("Before the start, check every other node from the head over C(ssh) as the running account, the way "
            "C(mpirun) reaches them, in parallel. A node that does not answer and an earlier run still alive "
            "there refuse the launch; missing or different O(file_contents) are sent. After a run that failed, "
            "what is left of it on every node is ended the same way. The check's connections stay open (OpenSSH "
            "masters in a C(/tmp/tf-ssh-*) directory of the running account, closed by the supervisor when the "
            "run ends) and C(mpirun) starts its daemons through them instead of a new handshake per node, unless "
            "O(tree_spawn) is set or O(mpirun_extra_args) or the environment set Open MPI's own C(plm_rsh_*) "
            "options (a C(plm_rsh_args) in an Open MPI parameter file is not seen, and the masters' option would "
            "override it, so give it in O(mpirun_extra_args) instead). V(false) checks the head alone (Cray PALS "
            "nodes, which C(mpiexec) reaches without C(ssh)); the clean-up on the other nodes is then the "
            "caller's (O(state=stopped) on each)."),
           default=True, role=None,
           module_value="{{ _launch_resolved.check_nodes }}"),
    Option("expect_packages", "dict",
           ("The packages (canonical name to version) that setup installed in the environment of O(python) on "
            "every node (the cached fact C(python_env_installed)). With O(check_nodes), the check before the "
            "start reads each node's environment (its distributions' metadata, no interpreter started) and "
            "refuses the launch when one differs, naming the node and the packages, before anything starts. "
            "Empty, no such check."),
           default={}, role=None,
           module_value="{{ _launch_resolved.expect_packages }}"),
    Option("detach", "bool", "Return once the run's processes run on every node instead of waiting "
           "for its end; the run belongs to its supervisor on the head either way.", default=False,
           short="detach",
           module_doc=(
               "Return as soon as the run's processes (C(torchrun), or the ranks) run on every node the head checks "
               "(under O(scheduler=slurm), as soon as the job runs), with RV(state=running) and the run id, instead "
               "of waiting for its end. Every check that refuses a launch still refuses it first. Follow the run "
               "with C(torchfleet logs -f), C(torchfleet wait) or M(torchfleet.cluster.torchrun_run_info)."), also_for=("restarted",)),
    Option("detach_when", "str", "With detach, return once the run's processes run (running; under "
           "Slurm once the job runs), or once the supervisor holds it (submitted).", default="running",
           choices=("running", "submitted"), short="detach_when",
           module_doc=(
               "With O(detach=true), when to return. V(running), once the run's processes run on every node (under "
               "O(scheduler=slurm), once the job runs). V(submitted), as soon as the supervisor holds the run "
               "(mpirun started, or the job submitted, pending or not), for a caller that follows the run itself, as "
               "C(torchfleet launch) does, printing Slurm's reason while the job waits."), also_for=("restarted",)),
    Option("scheduler", "str", "none: mpirun on the head reaches the nodes over ssh; slurm: the run "
           "is a Slurm batch job submitted with sbatch on the head. The role's default is slurm where "
           "setup set Slurm up (scheduler=slurm), else none.", default="none",
           choices=("none", "slurm"), role_choices=(),
           role_default="{{ 'slurm' if hostvars[launch_head].slurm_installed is defined else 'none' }}",
           short="scheduler",
           module_doc=(
               "V(none) starts C(mpirun) on the head, which reaches the other nodes over C(ssh).",
               "V(slurm) submits the run as a Slurm batch job with C(sbatch) on the head, as the account the module "
               "runs as. The job's script (C(job.sbatch) in the run's directory, written by the same code as "
               "C(torchfleet render --format slurm)) runs C(mpirun) inside the allocation, which starts its daemons "
               "through Slurm (C(--mca plm slurm)), never C(ssh). The job is named after the run id, its output is "
               "the run's C(launcher.log) (written on the job's first node, the head when the allocation starts with "
               "it, or any node with a shared home), and the supervisor follows it with C(scontrol) (RV(job_id), "
               "Slurm's reason while it is pending, its exit code). Stopping the run, and O(launch_timeout), call "
               "C(scancel). O(mode=mpich) and O(tree_spawn) cannot run under it and are refused, as are a head "
               "without C(sbatch), an unknown or down partition, a partition with fewer nodes than O(nodes), and a "
               "time limit Slurm would reject, before anything is submitted."),
           cli=(("launch", "slurm: submit the run as a Slurm batch job with sbatch on the head (-e "
                 "slurm_partition=, slurm_account=, slurm_time_limit=); default: mpirun over ssh"),)),
    Option("slurm_partition", "str", "With scheduler slurm, the partition; empty for Slurm's default.",
           role_default="", short="slurm_partition",
           module_doc="With O(scheduler=slurm), the partition (C(--partition)); default Slurm's default.",
           module_value="{{ launch_slurm_partition or omit }}"),
    Option("slurm_account", "str", "With scheduler slurm, the account charged.", role_default="",
           short="slurm_account",
           module_doc="With O(scheduler=slurm), the account charged (C(--account)).",
           module_value="{{ launch_slurm_account or omit }}"),
    Option("slurm_time_limit", "str", "With scheduler slurm, the job's time limit as sbatch --time "
           "takes it (90, 01:30:00, 1-00:00:00); empty for the partition's.", role_default="",
           short="slurm_time_limit",
           module_doc=(
               "With O(scheduler=slurm), the job's time limit (C(--time)) in a form C(sbatch) accepts (V(90), "
               "V(01:30:00), V(1-00:00:00)); at most the partition's. Default the partition's."),
           module_value="{{ launch_slurm_time_limit or omit }}"),
    Option("slurm_gpus_per_node", "int", "With scheduler slurm, GPUs per node requested as GRES "
           "(--gpus-per-node); 0 for none.", role_type="raw", role_default=0, short="slurm_gpus_per_node",
           module_doc=(
               "With O(scheduler=slurm), GPUs per node requested as Slurm GRES (C(--gpus-per-node)); unset, none are "
               "requested (a cluster whose GPUs are not GRES gives them to every job)."),
           module_value="{{ (launch_slurm_gpus_per_node | int) or omit }}"),
    Option("slurm_extra_args", "list", "With scheduler slurm, the site's own sbatch options (qos, "
           "constraint, reservation), one item each as '--option=value'.", default=[], elements="str",
           short="slurm_extra_args",
           module_doc=(
               "With O(scheduler=slurm), the site's own C(sbatch) options (qos, constraint, reservation), each item "
               "one option as C(--option=value), written into the batch script's header."),
           module_value=(
               "{{ launch_slurm_extra_args + (_launch_slurm_exclude if launch_scheduler == 'slurm' else []) }}")),
    Option("batch_whole_nodes", "bool", "With scheduler slurm, take whole nodes (--exclusive --mem=0): "
           "every CPU and all memory for a node's workers; false asks for one task's share.",
           default=True, short="batch_whole_nodes",
           module_doc=(
               "With O(scheduler=slurm), take whole nodes (C(--exclusive --mem=0)), so that a node's GPU workers and "
               "their data loaders have every CPU and all memory of it where the site enforces cgroups.",
               "V(false) asks for one task's share of each node.")),
    Option("exclude", "list", "Nodes of the group left out of this run (a list, or names joined by ','), "
           "as --limit leaves out those it does not name; never the head.", module=False, role_type="raw",
           role_default=[], short="exclude"),
    Option("group", "str", "The inventory group of the cluster's nodes (torchfleet_group, else cluster).",
           module=False, role_default="{{ torchfleet_group | default('cluster') }}"),
    Option("head_node", "str", "The node that runs the launcher and hosts the rendezvous (torchfleet_head, "
           "else the group's first node).", module=False, role="launch_head",
           role_default="{{ torchfleet_head | default(groups[launch_group][0]) }}"),
    Option("user", "str", "The training account the run belongs to (setup's cluster_user_name).",
           module=False, default="torchfleet", short="cluster_user_name"),
)
BY_NAME = {option.name: option for option in OPTIONS}


LIST_OPTIONS = tuple(option.name for option in OPTIONS if option.example)
RESTART_OPTIONS = ("max_restarts", "min_nodes", "restart_wait", "final_exit_codes", "spare_nodes", "rejoin_after")
# The options problems() reads; validate.yml hands it these alone (each variable templated costs
# the launch time), as tools/write_launch_options.py writes them.
CHECKED_OPTIONS = ("action", "script", *LIST_OPTIONS, "shared_storage", "run_id", "mode", "mpich_launcher",
                   "master_port", "nproc_per_node", "tree_spawn", "bind_to", "log_dir", *RESTART_OPTIONS, "fault_tolerance",
                   "scheduler",
                   "slurm_partition", "slurm_account", "slurm_time_limit", "slurm_gpus_per_node", "group",
                   "head_node", "exclude")
