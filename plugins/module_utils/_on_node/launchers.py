# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The launchers that start a run's processes on its nodes, each behind one small interface
(``Launcher``): Open MPI's mpirun over ssh (torchrun and rank modes), MPICH's Hydra and HPE
Cray PALS (mpich mode). A launcher gives the hostfile and the argv for a plan, the shell
expansion a node's command reads its node rank from, and what it refuses of a plan; the renderer
and the plan's checks ask the plan's launcher (``launcher_of``) rather than compare names.
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # launch_plan asks the launchers; they take its plans, never import it
    from .launch_plan import Node, Plan

MPICH_LAUNCHERS = ("hydra", "pals")

# Open MPI's TCP keepalive, set from silent_node_timeout (when it is not 0).
KEEPALIVE_MCA = ("oob_tcp_keepalive_time", "oob_tcp_keepalive_intvl", "oob_tcp_keepalive_probes")
KEEPALIVE_PROBES = 3


def keepalive_mca(silent_node_timeout: int) -> list[str]:
    """Open MPI's TCP keepalive on its daemon connections, so that a peer gone silent for about
    `silent_node_timeout` seconds is given up: idle time, then KEEPALIVE_PROBES unanswered probes.
    Nothing for 0."""
    if not silent_node_timeout:
        return []
    interval = max(1, silent_node_timeout // (2 * KEEPALIVE_PROBES))
    idle = max(1, silent_node_timeout - KEEPALIVE_PROBES * interval)
    values = (idle, interval, KEEPALIVE_PROBES)
    return [item for name, value in zip(KEEPALIVE_MCA, values) for item in ("--mca", name, str(value))]


class Launcher:
    """One way to start one process per node (torchrun's agent) or per rank (rank mode)."""
    name = ""
    node_rank = ""  # the shell expansion a node's command reads its node rank from
    keepalive = False  # whether silent_node_timeout sets its daemons' TCP keepalive (KEEPALIVE_MCA)
    setup_fact = ""  # the fact in which setup records the launcher's full path on the head
    restarts = False  # whether a run's supervisor restarts it (a new launcher on the nodes left)
    run_as_root_flag = False  # whether root must say so (Open MPI's --allow-run-as-root)
    slurm_args: tuple[str, ...] | None = None  # its arguments inside a Slurm allocation; None: not there
    rides_ssh_masters = False  # whether its ssh to the nodes can ride the launch's masters (ssh_control_path)
    rank_files = False  # whether it keeps each rank's output in files of its own (a run's ranks/ directory)
    over_ssh = True  # whether the head reaches every node over ssh (else the launcher starts them itself)
    binds = True  # whether it binds the node's processes as bind_to says (mpirun's --bind-to)

    def setup_problem(self, head: str, mode: str, found: dict[str, str]) -> str | None:
        """What setup left out on the head (`found`: setup's facts, by setup_fact) that this
        launcher needs, and the fix; None when nothing."""
        return None

    def failure(self, own_output: str) -> dict | None:
        """{host, exit_code} of the first process the launcher's own output says failed, where it
        says so in a way of its own; None to read it as Open MPI's (report.parse_mpirun_failure)."""
        return None

    def hostfile(self, order: list[Node]) -> str:
        return "".join(f"{node.address}\n" for node in order)

    def argv(self, plan: Plan, order: list[Node], ifaces: list[str], env_names: list[str], world_size: int,
             tail: list[str]) -> list[str]:
        raise NotImplementedError

    def problem(self, plan: Plan) -> str | None:
        """What this launcher cannot do of `plan` and the fix; None when nothing."""
        return None


class OpenMPI(Launcher):
    """Open MPI's mpirun, starting its daemons over ssh from the head (through the launch's ssh
    masters where the plan has them); the ranks' output tagged and, with log_dir, kept per rank."""
    name = "Open MPI's mpirun"
    node_rank = "${OMPI_COMM_WORLD_RANK:?not started by Open MPI mpirun}"
    keepalive = True
    setup_fact = "openmpi_mpirun"
    restarts = True
    run_as_root_flag = True
    slurm_args = ("--mca", "plm", "slurm")  # Slurm starts the daemons (srun): never ssh inside an allocation
    rides_ssh_masters = True  # plm_rsh_args
    rank_files = True  # --output-filename

    def setup_problem(self, head, mode, found):
        # Without a recorded mpirun the PATH's is run; with MPICH alone that would be MPICH's,
        # which fails on Open MPI's options.
        if found.get(HYDRA.setup_fact) and not found.get(self.setup_fact):
            return (f"launch_mode={mode} runs Open MPI's mpirun, but setup installed MPICH alone on {head}: "
                    f"use -e launch_mode=mpich, or run `ansible-playbook setup.yml -i INVENTORY` "
                    f"(mpi_implementation=openmpi) to add Open MPI beside it.")
        return None

    def hostfile(self, order: list[Node]) -> str:
        return "".join(f"{node.address} slots={node.slots}\n" for node in order)

    def argv(self, plan, order, ifaces, env_names, world_size, tail):
        request = plan.request
        if request.mode == "rank":
            argv = [request.launcher or "mpirun", "-np", str(world_size), "--map-by", "slot"]
        else:
            argv = [request.launcher or "mpirun", "-np", str(len(order)), "--map-by", "ppr:1:node"]
        argv += ["--bind-to", request.bind_to, "--hostfile", plan.hostfile_path,
                 "--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]
        if not request.tree_spawn:
            argv += ["--mca", "plm_rsh_no_tree_spawn", "1"]
        if plan.ssh_control_path:
            argv += ["--mca", "plm_rsh_args", f"-o ControlPath={plan.ssh_control_path}"]
        argv += keepalive_mca(request.silent_node_timeout)
        # A CIDR covers every node whatever its NIC is called; written normalized (host bits 0).
        if request.network:
            if_include = str(ipaddress.ip_network(request.network, strict=False))
        else:
            if_include = ",".join(ifaces)
        if if_include:
            argv += ["--mca", "btl_tcp_if_include", if_include, "--mca", "oob_tcp_if_include", if_include]
        for name in env_names:
            argv += ["-x", name]
        if plan.log_dir:
            argv += ["--output-filename", plan.log_dir]
        # "[JOB,RANK]<stdout>:" on every line: which node (torchrun mode) or rank (rank mode)
        # wrote it, so the run's output can be followed per rank (_on_node.labels.shown).
        argv.append("--tag-output")
        if request.allow_run_as_root:
            argv.append("--allow-run-as-root")
        return argv + [*request.mpirun_extra_args, *tail]

    def problem(self, plan):
        if plan.ssh_control_path is not None and plan.request.tree_spawn:
            return ("ssh_control_path serves the head's own ssh to every node, which tree_spawn does not use; "
                    "leave it unset")
        return None


# Hydra, a process (a node's torchrun) that ended badly; the node as the hostfile gave it, and
# the status, which for a signal is the signal's number:
#   =   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
#   =   PID 3103 RUNNING AT 172.19.0.3
#   =   EXIT CODE: 9
#   ...
#   YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)
_HYDRA_BAD = re.compile(r"BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\s*\n=\s*PID \d+ RUNNING AT "
                        r"(\S+)\s*\n=\s*EXIT CODE: (\d+)")
_HYDRA_SIGNAL = re.compile(r"EXIT STRING: .*\(signal (\d+)\)")


class Hydra(Launcher):
    """MPICH's Hydra (Intel MPI's too): mpiexec -launcher ssh, one process a node, each line
    prefixed with its rank; its own output, no per-rank files."""
    name = "MPICH's mpiexec"
    node_rank = "${PMI_RANK:-${PALS_RANKID:?not started by mpiexec}}"
    setup_fact = "mpich_mpiexec"

    def setup_problem(self, head, mode, found):
        if not found.get(self.setup_fact):
            return (f"launch_mode={mode} runs MPICH's mpiexec, but setup recorded none on {head}: run "
                    f"`ansible-playbook setup.yml -i INVENTORY -e mpi_implementation=mpich` first (MPICH "
                    f"goes beside Open MPI; each is called by its full path).")
        return None

    def failure(self, own_output):
        """The node and status of the first process Hydra names; a signal N becomes 128+N."""
        match = _HYDRA_BAD.search(own_output)
        if not match:
            return None
        killed = _HYDRA_SIGNAL.search(own_output, match.end())
        return {"host": match.group(1), "exit_code": 128 + int(killed.group(1)) if killed else int(match.group(2))}

    def argv(self, plan, order, ifaces, env_names, world_size, tail):
        request = plan.request
        argv = [request.launcher or "mpiexec", "-launcher", "ssh", "-n", str(len(order)), "-ppn", "1",
                "-f", plan.hostfile_path, "-bind-to", request.bind_to, "-genvall"]
        if len(ifaces) == 1:
            argv += ["-iface", ifaces[0]]
        return argv + ["-prepend-rank", *request.mpirun_extra_args, *tail]

    def problem(self, plan):
        request = plan.request
        if plan.log_dir is not None:
            return ("log_dir (per-rank log files) needs Open MPI's --output-filename; in mpich mode leave "
                    "log_dir unset and keep mpiexec's own output")
        for name, given in (("allow_run_as_root", request.allow_run_as_root), ("tree_spawn", request.tree_spawn)):
            if given:
                return f"{name} is an Open MPI option; leave it unset in mpich mode"
        if plan.ssh_control_path is not None:
            return ("ssh_control_path serves the head's own ssh to every node, which mpich mode does not use; "
                    "leave it unset")
        return None


class Pals(Hydra):
    """HPE Cray PALS's mpiexec (Cray MPICH's): it starts the nodes' processes itself (no ssh from
    the head)."""
    over_ssh = False
    binds = False  # --cpu-bind none: PALS's binding is not mpirun's

    def argv(self, plan, order, ifaces, env_names, world_size, tail):
        request = plan.request
        return [request.launcher or "mpiexec", "-n", str(len(order)), "--ppn", "1", "--cpu-bind", "none",
                "--hostfile", plan.hostfile_path, "--envall", *request.mpirun_extra_args, *tail]


OPEN_MPI, HYDRA, PALS = OpenMPI(), Hydra(), Pals()
_MPICH = {"hydra": HYDRA, "pals": PALS}


def choice_problem(mode: str, mpich_launcher: str | None) -> str | None:
    """What is wrong with a request's choice of launcher; None when nothing. The controller's
    check (_launch_checks) and the plan's call it: one rule."""
    if mode == "mpich" and mpich_launcher not in MPICH_LAUNCHERS:
        return (f"mpich_launcher is '{mpich_launcher or ''}': give hydra (MPICH's Hydra, Intel MPI) or pals "
                f"(HPE Cray PALS), or leave it unset for what setup (mpi_implementation=mpich) read from mpiexec "
                f"--version; mpich mode needs to know which mpiexec it runs")
    if mpich_launcher and mode != "mpich":
        return f"mpich_launcher applies to mpich mode only; leave it unset in {mode} mode"
    return None


def flavour(mode: str, given: str | None, found: str | None) -> str | None:
    """The MPICH flavour a request runs under: the one given, else the one setup read from
    mpiexec (`found`); None in a mode that runs no mpiexec."""
    return (given or found or None) if mode == "mpich" else None


def launcher_named(mode: str, mpich_launcher: str | None) -> Launcher:
    """The launcher of a mode and MPICH flavour (the choice checked by choice_problem; before
    that check, Hydra for a flavour not known yet)."""
    return _MPICH.get(mpich_launcher or "", HYDRA) if mode == "mpich" else OPEN_MPI


def launcher_of(request) -> Launcher:
    """The launcher a request runs under."""
    return launcher_named(request.mode, request.mpich_launcher)
