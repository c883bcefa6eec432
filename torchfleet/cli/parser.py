"""The command's arguments: one subcommand per job, each with its --help and exit codes."""

from __future__ import annotations

import argparse

from torchfleet import __version__
from torchfleet.cli.cluster import cluster_command
from torchfleet.cli.launch import launch_command, restart_command
from torchfleet.cli.render import render_command
from torchfleet.cli.run_control import logs_command, status_command, stop_command, wait_command
from torchfleet.cli.runs import runs_command
from torchfleet.cli.setup import setup_command
from torchfleet.cli.usage import ACTIVE_STATES, ANSIBLE_EXITS, RUN_EXITS


def option_flags(command: str) -> list:
    """[(the launch option, its flag's help)] of the launch options `torchfleet COMMAND` takes a
    flag of, as the option table says (Option.cli)."""
    from torchfleet.collection import module_util

    return [(option, dict(option.cli)[command]) for option in module_util("_launch_options").OPTIONS
            if command in dict(option.cli)]


def add_option_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """--NAME for each launch option the table gives `command` a flag of: a switch for a bool, a
    number N for an int, one of its choices for a choice. Left out, it is None: not passed on."""
    for option, text in option_flags(command):
        flag = "--" + option.name.replace("_", "-")
        if option.type == "bool":
            parser.add_argument(flag, action="store_const", const=True, help=text)
        elif option.choices:
            parser.add_argument(flag, choices=list(option.choices), help=text)
        else:
            parser.add_argument(flag, type=int if option.type == "int" else str,
                                metavar="N" if option.type == "int" else option.name.upper(), help=text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchfleet",
        description="Turn a handful of machines into a multi-node PyTorch cluster and launch on it.",
    )
    parser.add_argument("--version", action="version", version=f"torchfleet {__version__}")
    # COMMAND, not the list of every command, which is wider than a terminal of 80 columns.
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    cluster = sub.add_parser("cluster", help="a local cluster of containers for trying and testing")
    cluster.add_argument("action", choices=["up", "down", "image", "status"],
                         help="up: start (or keep) the nodes; down: remove them; image: build the node "
                              "image only; status: list the nodes")
    cluster.add_argument("--nodes", type=int, default=3, help="number of nodes for `up` (default 3)")
    cluster.add_argument("--name", default="local",
                         help="cluster name; containers are tf-NAME-nodeN (default: local)")
    cluster.add_argument("--inventory", help="where `up` writes the inventory (default: inventory/NAME.yml)")
    cluster.add_argument("--slurm", action="store_true",
                         help="with `up` and `image`: nodes with Slurm's packages (munge, slurmd, slurmctld), "
                              "which setup.yml -e scheduler=slurm then sets up")
    cluster.add_argument("--rebuild", action="store_true", help="with `image`: build even if cached")
    cluster.add_argument("--json", action="store_true", help="with `status`: print JSON")
    cluster.set_defaults(func=cluster_command)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-i", "--inventory", action="append", default=[],
                        help="inventory path or MPI/PBS/Slurm hostfile (repeatable; default: ./inventory)")
    common.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                        help="KEY=VALUE, JSON or @FILE, as ansible-playbook (repeatable)")
    common.add_argument("--limit", help="only these hosts (an Ansible pattern)")
    ansible = common.add_argument_group("as ansible-playbook takes them")
    ansible.add_argument("-u", "--user", help="connect as this user")
    ansible.add_argument("--private-key", metavar="FILE", help="the ssh key to connect with")
    ansible.add_argument("--forks", type=int, metavar="N", help="nodes Ansible works on at once")
    ansible.add_argument("-K", "--ask-become-pass", action="store_true", help="ask for the become (sudo) password")
    ansible.add_argument("--vault-password-file", action="append", default=[], metavar="FILE",
                         help="decrypt vaulted -e @FILE and variables with this (repeatable)")
    ansible.add_argument("-J", "--ask-vault-pass", action="store_true", help="ask for the Vault password")
    common.add_argument("--json", action="store_true", help="print the result as JSON")
    common.add_argument("-v", "--verbose", action="count", default=0,
                        help="print Ansible's own output (-vv and more: Ansible's verbosity)")

    sub.add_parser("setup", parents=[common], help="prepare every node (playbook setup.yml)",
                   description="Run torchfleet.cluster.setup on the inventory.",
                   epilog=ANSIBLE_EXITS).set_defaults(func=setup_command)
    for name, func, text, exits in (
            ("launch", launch_command, "start a training run and follow it to its end", RUN_EXITS),
            ("render", render_command, "print the launch command, hostfile and env; runs nothing",
             "exit: 0 rendered, 1 the request cannot be rendered (the message says why), 2 bad usage")):
        p = sub.add_parser(name, parents=[common], help=text, epilog=exits,
                           usage=f"torchfleet {name} [options] SCRIPT [-- ARGS...]")
        p.add_argument("script", metavar="SCRIPT", help="the training script")
        p.set_defaults(func=func, script_args=[])
        if name == "launch":
            p.add_argument("--detach", action="store_true",
                           help="return with the run id once every node's ranks have started")
            p.add_argument("--all-ranks", action="store_true",
                           help="stream every rank's output, each line as [rank N host] (default: rank 0's)")
        add_option_flags(p, "launch")  # render takes every flag launch takes: it renders the same launch
        if name == "render":
            p.add_argument("--format", choices=["text", "json", "pbs", "slurm"], default="text",
                           help="pbs/slurm: a batch script that launches from inside an allocation")
            p.add_argument("--nodes", type=int, help="pbs/slurm: number of nodes")
            p.add_argument("--gpus-per-node", type=int, help="pbs/slurm: GPUs (workers) per node")
            p.add_argument("--walltime", help="pbs/slurm: time limit, HH:MM:SS")
            p.add_argument("--queue", "--partition", dest="queue", help="pbs queue / slurm partition")
            p.add_argument("--account", help="pbs/slurm: account to charge")
    restart = sub.add_parser("restart", parents=[common], epilog=RUN_EXITS,
                             help="start a run that failed, was lost or stopped again, from its own "
                                  "request, as its next attempt, and follow it to its end",
                             description="The run's script resumes from its checkpoint "
                                         "(TORCHFLEET_RESTART_COUNT tells it the attempt). Its secrets "
                                         "are never stored: give them again (-e env_secrets=...).")
    restart.add_argument("run_id", metavar="RUN_ID", help="the run (torchfleet runs lists them)")
    restart.add_argument("--detach", action="store_true",
                         help="return once every node's ranks have started")
    restart.add_argument("--all-ranks", action="store_true", help="stream every rank's output")
    add_option_flags(restart, "restart")
    restart.set_defaults(func=restart_command)
    stop = sub.add_parser("stop", parents=[common], help="stop a run on every node (RUN_ID, or --all)",
                          epilog="exit: 0 stopped (or nothing alive), 2 a bare stop with several runs alive "
                                 "(none stopped) or bad usage, else Ansible's code")
    stop.add_argument("run_id", nargs="?", help="the run; left out: the one run alive, if only one is")
    stop.add_argument("--all", action="store_true", help="every run of torchfleet")
    stop.set_defaults(func=stop_command)
    status = sub.add_parser("status", parents=[common],
                            help="which runs are alive on which node; with RUN_ID, that run's record",
                            epilog="exit: 0, 1 no such run, 2 bad usage, else Ansible's code")
    status.add_argument("run_id", nargs="?", help="the run whose record to show")
    status.set_defaults(func=status_command)
    logs = sub.add_parser("logs", parents=[common], help="a run's output (rank 0's by default)",
                          epilog="exit: 0 (with -f: " + RUN_EXITS[6:] + "), 1 no log of the run, 2 bad usage")
    logs.add_argument("run_id", nargs="?", help="the run (default: the newest)")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="follow the run until it ends, and exit with its exit code")
    logs.add_argument("--since-now", action="store_true", help="with -f: only what is written from now on")
    which = logs.add_mutually_exclusive_group()
    which.add_argument("--all-ranks", action="store_true", help="every rank's output, as [rank N host] lines")
    which.add_argument("--rank", type=int, metavar="N", help="rank N's output alone")
    which.add_argument("--node", metavar="HOST", help="the output of the ranks on HOST, as [rank N host] lines")
    which.add_argument("--stacks", action="store_true",
                       help="the Python stacks of every rank, taken when an attempt of the run hung")
    logs.add_argument("--tail", type=int, metavar="N", help="only the last N lines (then, with -f, what follows)")
    logs.set_defaults(func=logs_command)
    wait = sub.add_parser("wait", parents=[common], epilog=RUN_EXITS,
                          help="wait for a run to end, print its end report, exit with its exit code")
    wait.add_argument("run_id", nargs="?", help="the run (default: the newest)")
    wait.set_defaults(func=wait_command)
    runs = sub.add_parser("runs", parents=[common], help="the cluster's runs, newest first, with their "
                          "state and exit code; --prune removes old ones", epilog=ANSIBLE_EXITS)
    runs.add_argument("--prune", action="store_true",
                      help="remove ended runs' directories on every node (with --keep, --older-than)")
    runs.add_argument("--keep", type=int, metavar="N", help="with --prune: keep the N newest runs")
    runs.add_argument("--older-than", type=float, metavar="DAYS",
                      help="with --prune: only runs started more than DAYS days ago")
    states = [*ACTIVE_STATES, "succeeded", "failed", "stopped", "timed_out", "hung", "lost"]
    runs.add_argument("--state", choices=states, metavar="STATE", help=f"only runs in this state: {', '.join(states)}")
    runs.add_argument("-n", dest="count", type=int, metavar="N", help="only the N newest (after --state)")
    runs.add_argument("--all-users", action="store_true",
                      help="also other accounts' runs alive on the head (its run board), with each run's account")
    runs.set_defaults(func=runs_command)
    # Its own options (torchfleet doctor --help): main() hands the rest of the line to it.
    sub.add_parser("doctor", add_help=False, help="check the cluster before a run: ssh mesh, versions, "
                   "GPUs, network, port, leftovers (exit 0 well, 1 a check failed, 2 could not run)")
    return parser
