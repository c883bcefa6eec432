"""What torchfleet runs on the nodes outside Ansible (the supervisor, the follower and guardian on
the head; the probe and line server on every node), standard library only.

- supervisor: owns a run from its start to its end (`python3 -S -m _on_node.supervisor RUN_DIR`),
  one attempt's launcher at a time;
- attempts: the attempt loop and the restart policy (the nodes, the port of the next attempt);
- liveness: whether each node is alive, dead (proven at once) or silent (tolerated);
- transitions: the one writer of the run's record, its states and who may change them;
- guardian: ends a run whose supervisor died, and records it lost;
- slurm_job: the run's Slurm job; slurm: Slurm as the launch checks and drives it;
- launch_request: the launch request, typed (LaunchRequest), as run.json keeps it;
- launch_plan: what one launch is (Plan); plan_checks: its checks; renderer: the one renderer, its
  launcher's argv, hostfile and environment (the module's and the CLI's, and each restart's);
  launchers: Open MPI, MPICH's Hydra and PALS, each behind one interface (argv, hostfile, checks);
  batch_script: a Slurm job's script;
- record: the run's record (state.json), the supervisor's plan (run.json), the index of runs;
- follower: a run's output as it is written, and its end (`python3 -S -m _on_node.follower follow
  RUN_DIR`); labels: which rank and node wrote each line, and which lines it shows; tail: a
  growing file read in pieces of lines; line_server: the other nodes' worker files, for it;
- report: what a run's logs say (the failing rank) and the words of every end;
- probe: what a launch asks of each node (`python3 -S -m _on_node.probe`, a JSON request on stdin),
  answered by processes (a run's processes, found and ended), node_files (the run's files, written
  whole), log_ends (a log's last lines), packages (an environment's), interfaces; ports: the
  rendezvous port, free or held (the launch's check and the doctor's);
- privileges: root's put down before a run's files are read (the follower as root);
- board: the run board, where each node's runs announce themselves to every account;
- ssh_to_nodes: the head's ssh to the other nodes, in parallel (probes, the clean-up, the ssh
  masters); loader: several of these files made one `python3 -S -c` program.

The launch module installs the package once per version on the head (a directory named for the
digest of its files, see _launch_start.install_head_package): every run of that version starts
from it, and a run restarted by hand starts from the version that restarts it. The files are imported within the package by relative
imports alone, so the package works under any name: ansible_collections...module_utils._on_node
(module, filters, CLI) and `_on_node` on the head. Some also travel as one `python3 -S -c` program of
the files they need (loader.py): the follower from the controller to the head (follower.PROGRAM),
the follower's line server from the head to the other nodes (line_server.PROGRAM), the probe with the board
it reads (ssh_to_nodes.program).
"""

from __future__ import annotations

import os

# The package's files, as the launch module copies them to the head.
FILES = ("__init__", "attempts", "batch_script", "board", "follower", "guardian", "interfaces", "labels", "launch_plan",
         "launch_request", "launchers", "line_server", "liveness", "loader", "log_ends", "node_checks", "node_files",
         "packages", "plan_checks", "ports", "privileges", "probe", "processes", "progress", "record", "renderer",
         "replica_groups", "report", "slurm", "slurm_job", "ssh_to_nodes", "stacks", "supervisor", "tail", "transitions")


def source(name: str) -> str:
    """The text of one of FILES: a plain file beside this one, or a member of the launch
    module's zip under AnsiballZ (where inspect.getsource fails now and then)."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    try:
        with open(here, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        import pkgutil  # here only: its imports would slow every start of the supervisor

        return (pkgutil.get_data(__name__, name + ".py") or b"").decode()
