"""A run's supervisor: on the head, it owns the launcher for the whole run, outliving whatever
started it (the launch module, Ansible, the controller, its connection).

The launch module writes the run's plan (`run.json`, a SupervisorPlan, no secret in it) into the
run's directory, then starts `python3 -S -m _on_node.supervisor RUN_DIR` from the head package
installed for this version, in a session of its own with the launcher's environment. From then
on the supervisor does what follows a start, watched or not: one attempt after another
(attempts.py), each its launcher from start to end (here): it enforces launch_timeout, ends an
attempt whose node died or stayed silent past the tolerance (liveness.py), stops the run on
SIGTERM (`launch_action=stop`, `torchfleet stop`, Ctrl-C in `torchfleet launch`), names the first
rank that failed (report.py), ends what is left on every node, and keeps the run's record through
its transitions (transitions.py). Standard library only: it runs outside Ansible.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

from . import attempts, report, slurm, stacks
from .ssh_to_nodes import (PROBE_TIMEOUT, close_ssh_masters, end_run_on_nodes, nodes_without_ranks, probe_nodes,
                           take_stacks)
from .guardian import start_guardian
from .launch_plan import Node, plan_of_run
from .liveness import Liveness, NodeState, ending_of, not_alive_of, wall_time
from .progress import LocalScan, Progress, patterns
from .log_ends import read_end
from .processes import SUPERVISOR_VAR, end_run
from .record import STATE_FILE, RunRecord, SupervisorPlan
from .renderer import render
from .replica_groups import ReplicaGroups
from .report import now_iso
from .slurm_job import SlurmJob
from .transitions import Owner, RecordKeeper, RecordRefused, to_log

START_FIRST_LOOK = 5.0  # seconds from the launcher's start to the start watch's first look
START_POLL = 1.0  # seconds between the start watch's later looks at the nodes
LOST_LAUNCHER_GRACE = 1.0  # seconds mpirun has to pass a TERM on once a node is lost (silent)
DEAD_LAUNCHER_GRACE = 0.5  # the same once a node is proven dead: mpirun is ending by itself then
SETTLE = 1.0  # seconds a failed launcher's end waits for a node's death to be proven
PROGRESS_EVERY = 10.0  # seconds between two writes of the ranks' progress into the record


@dataclass
class AttemptEnd:  # pylint: disable=too-many-instance-attributes
    """What ended an attempt, as wait_for_end saw it, for conclude."""
    timed_out: bool = False  # launch_timeout passed
    late: list = field(default_factory=list)  # nodes where no process began within start_timeout
    ending: dict = field(default_factory=dict)  # {node: its liveness verdict}: dead or silent too long
    stopped: int | None = None  # the signal that stopped the run
    survivors: list = field(default_factory=list)  # processes that outlived the stop
    warnings: list = field(default_factory=list)
    waiting: tuple = (None, None)  # a Slurm job's state and reason before its cancel
    grow: list = field(default_factory=list)  # nodes back, taken in at the checkpoint
    hung: dict | None = None  # progress.hung's verdict, with the ranks named and their stacks
    rc: int | None = None


class _Stop:
    """SIGTERM or SIGINT: stop the run (recorded here, acted on by the wait loop)."""
    signum = None

    @classmethod
    def handler(cls, signum, _frame):
        cls.signum = signum


def stop_launcher(proc, run_id: str, grace: int, launcher_grace: float | None = None) -> list[dict]:
    """TERM the launcher's group (mpirun forwards it to every rank on every node), KILL after
    `grace` (the launcher's own wait: `launcher_grace` where given), then stop whatever of the run
    is left here: local ranks and torchrun workers run in process groups of their own and outlive
    a killed mpirun. Returns what survived SIGKILL."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except OSError:
        pass
    try:
        proc.wait(timeout=grace if launcher_grace is None else launcher_grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
    return end_run(run_id, grace, spare_guardian=True)[1]


def launcher_env() -> dict:
    """The launcher's environment: the supervisor's, without the mark that makes it one."""
    env = dict(os.environ)
    env.pop(SUPERVISOR_VAR, None)
    return env


def new_record(plan: SupervisorPlan) -> RunRecord:
    """The record of a run that is starting: what `torchfleet runs` and torchrun_run_info show."""
    return RunRecord(
        run_id=plan.run_id, command=plan.command, nodes=[node["name"] for node in plan.nodes],
        slots=[node["slots"] for node in plan.nodes], head=plan.head, mode=plan.request.mode,
        nproc=plan.nproc, world_size=plan.world_size, started=now_iso(), started_at=time.time(),
        log_dir=plan.paths["run"], launcher_log=plan.paths["launcher"], scheduler=plan.request.scheduler,
        msg=f"run {plan.run_id} is starting")


class Run:
    """One run, from the plan the launch module wrote into its directory."""

    def __init__(self, run_dir: str):
        self.plan = SupervisorPlan.read(run_dir)
        self.run_dir = run_dir
        self.nodes = [Node.of(node) for node in self.plan.nodes]
        record = new_record(self.plan)
        self.attempts: list = []  # with restarts: each attempt, as the record lists it
        if self.plan.attempts_before:
            with open(os.path.join(run_dir, STATE_FILE), encoding="utf-8") as handle:
                self.attempts = attempts.earlier_attempts(json.load(handle), self.plan)
            record = record.updated(started=self.attempts[0]["started"])
        self.keeper = RecordKeeper(run_dir, record, Owner.this_process())
        self.launcher_env: dict = {}  # a restart's environment over the supervisor's
        self.slurm_names: dict = {}  # {inventory name: Slurm's}, from each allocation
        self.not_alive: dict = {}  # after an attempt: {name: Verdict} of its nodes dead, lost or silent
        # The launcher (or Slurm job, or torchft's replica groups) of the attempt in flight.
        self.proc: subprocess.Popen | SlurmJob | ReplicaGroups | None = None
        self.over = threading.Event()  # set when the attempt in flight ends: its threads stop
        self.port = self.plan.request.master_port  # the attempt's rendezvous port
        # Runs that heal (attempts.watch_left_out): nodes back that passed the checks, set when
        # there is one (the attempt ends at the next checkpoint), whether the attempt ended so;
        # {node: why} of those that failed them; who joined and left the world this attempt.
        self.back: list = []
        self.grow = threading.Event()
        self.grew = False
        self.not_taken_back: dict = {}
        self.joined: list = []
        self.left: list = []
        self.liveness: Liveness | None = None  # the attempt's beats, while it runs

    @staticmethod
    def stop_requested() -> int | None:
        return _Stop.signum

    def probe_answers(self, nodes, requests: dict, **kwargs) -> dict:
        """Each node's answer to its probe request ({name: request}), over the run's ssh."""
        plan = self.plan
        return probe_nodes(nodes, plan.head, plan.ssh, plan.request.python, requests,
                           control_dir=plan.control_dir, **kwargs)

    def read_log(self, host: str, pattern: str):
        """(path, last lines) of a log on the node that wrote it; (None, []) where unreachable."""
        node = next((node for node in self.nodes if node.name == host), None)
        if node is None or node.name in self.not_alive or (node.name != self.plan.head and not self.plan.request.check_nodes):
            return None, []
        request = {"tail": {"pattern": pattern, "lines": report.TAIL_LINES}}
        answer = self.probe_answers([node], {host: request}, timeout=PROBE_TIMEOUT, connect_timeout=5)[host]
        found = answer.get("tail") or {}
        return found.get("path"), found.get("lines", [])

    def nodes_of_allocation(self, names: list[str]) -> dict:
        """The inventory's nodes in the allocation's order (where each Slurm node name resolves to
        a node's address), so ranks are named by the node they ran on; {} where they do not map."""
        by_address = {node.address: node for node in self.nodes}
        try:
            order = [by_address.get(socket.gethostbyname(name)) for name in names]
        except OSError:
            return {}
        found = [node for node in order if node is not None]
        if not names or len(found) < len(order):
            return {}
        self.nodes = found
        return {"nodes": [node.name for node in found], "slots": [node.slots for node in found]}

    def start(self, append: bool = False):
        plan, paths = self.plan, self.plan.paths
        env = dict(launcher_env(), **self.launcher_env)
        flags = os.O_APPEND if append else os.O_CREAT | os.O_EXCL  # a restart adds to the log
        log = os.open(paths["launcher"], os.O_WRONLY | flags, 0o640)
        try:
            # A session of its own: one killpg reaches the launcher and what it started here.
            return subprocess.Popen(plan.argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True, cwd=plan.cwd)
        finally:
            os.close(log)

    def start_groups(self) -> ReplicaGroups:
        """fault_tolerance torchft: the Lighthouse and each node's replica group (replica_groups.py),
        rendered again from the run's plan as a restart is."""
        groups = ReplicaGroups(self, render(plan_of_run(self.plan)), dict(launcher_env(), **self.launcher_env),
                               self.plan.paths["launcher"])
        groups.start()
        return groups

    def rewatch(self, name: str) -> None:
        """A node back whose group started again: its beat, anew (a dead node's beat ended)."""
        if self.liveness is not None:
            self.liveness.rewatch(name)

    def watch_start(self, launcher_pid: int, seconds: int, late: list, over: threading.Event,
                    everywhere: threading.Event) -> None:
        """In a thread: until a process of the run runs on every node the head checks (then
        `everywhere` is set), look every START_POLL s; past `seconds`, put the nodes where none
        started in `late`, which ends the run (a daemon that cannot call back would keep mpirun
        waiting for ever)."""
        nodes = self.nodes if self.plan.request.check_nodes else [n for n in self.nodes if n.name == self.plan.head]
        deadline = time.monotonic() + seconds
        launchers = {os.getpid(), launcher_pid}
        # The first look waits: most runs have started everywhere by then, and a short one has
        # ended, and costs no probe of every node.
        if over.wait(min(START_FIRST_LOOK, seconds)):
            return
        while _Stop.signum is None and not over.is_set():
            left = max(1, int(deadline - time.monotonic()))
            missing = nodes_without_ranks(nodes, self.plan.head, self.plan.ssh, self.plan.request.python,
                                          self.plan.run_id, launchers, self.plan.control_dir,
                                          timeout=min(PROBE_TIMEOUT, left))
            if not missing:
                everywhere.set()
                return
            if over.is_set():  # the launcher ended while it looked: nothing of it to judge
                return
            if time.monotonic() >= deadline:
                late.extend(missing)
                return
            over.wait(START_POLL)

    def globs(self) -> dict:
        """{name: patterns of the attempt's ranks' files on that node} (progress.py)."""
        plan = self.plan
        return {node.name: patterns(plan.request.mode, plan.paths.get("workers") if plan.worker_files else None,
                                    plan.paths.get("ranks"), index)
                for index, node in enumerate(self.nodes)}

    def watch(self, progress: Progress | None, globs: dict) -> Liveness:
        """The beats of the attempt's other nodes (liveness.py), with their ranks' progress."""
        plan = self.plan
        return Liveness([node for node in self.nodes if node.name != plan.head], plan.ssh, plan.request.python,
                        plan.request.heartbeat_timeout, plan.control_dir, progress=progress, globs=globs)

    def keep_stacks(self) -> dict:
        """{rank: {"stacks", "collectives", "entered"}} of the attempt's ranks on every node that
        answers (stacks.take), kept on the head as RUN_DIR/stacks/attempt_N/rank_R.txt and, with
        the flight recorder in short, rank_R.collectives.txt (`torchfleet logs --stacks`)."""
        plan, attempt = self.plan, self.attempt_number
        taken = take_stacks(self.nodes, plan.head, plan.ssh if plan.request.check_nodes else None,
                            plan.request.python, plan.run_id, plan.paths["run"], attempt, plan.control_dir)
        where = os.path.join(plan.paths["run"], stacks.STACKS_DIR, f"attempt_{attempt}")
        try:
            os.makedirs(where, mode=0o750, exist_ok=True)
            for rank, took in taken.items():
                for suffix, key in ((".txt", "stacks"), (".collectives.txt", "collectives")):
                    if took.get(key):
                        with open(os.path.join(where, f"rank_{rank}{suffix}"), "w", encoding="utf-8") as handle:
                            handle.write(took[key])
        except OSError:
            pass  # a full disk: the stacks are quoted in the record still
        return taken

    def progress(self) -> Progress:
        """The attempt's ranks' progress, and its hang timeout (hang_timeout: auto learns it)."""
        plan = self.plan
        given = str(getattr(plan.request, "hang_timeout", None) or "auto").strip()
        return Progress([node.name for node in self.nodes], plan.nproc or 1, [node.slots for node in self.nodes],
                        None if given == "auto" else int(given))

    def attempt(self, attempt: int, begun: float):
        """One attempt of the run: its launcher from start to end, and the clean-up after it.
        (state, message, record changes, cause) where `cause` says why a failure a restart can
        help happened (None for any other end); None where the launcher could not start."""
        plan = self.plan
        slurm_job = plan.request.scheduler == "slurm"
        self.not_alive = {}
        proc: subprocess.Popen | SlurmJob | ReplicaGroups
        try:
            if slurm_job:
                proc = SlurmJob(self)
                proc.submit(launcher_env())
            elif plan.request.fault_tolerance == "torchft":
                proc = self.start_groups()
            else:
                proc = self.start(append=attempt > 0)
        except (OSError, subprocess.SubprocessError, slurm.SlurmError) as err:
            self.keeper.end("failed", rc=127, ended=now_iso(), duration=0.0,
                            msg=f"cannot start {plan.argv[0]}: {err}" if not slurm_job else str(err))
            return None
        self.proc, self.grew, self.back, self.grow = proc, False, [], threading.Event()
        self.attempt_number = attempt
        if plan.request.max_restarts or plan.attempts_before:
            self.attempts.append({"attempt": attempt, "started": now_iso(), "ended": None,
                                  "nodes": [node.name for node in self.nodes],
                                  "world_size": plan.world_size, "cause": None,
                                  "workers": plan.paths.get("workers") or None, "port": self.port,
                                  **({"joined": self.joined} if self.joined else {}),
                                  **({"left": self.left} if self.left else {})})
        left_out = [node["name"] for node in plan.request.nodes or ()
                    if node["name"] not in {node.name for node in self.nodes}]
        watcher = None
        if left_out and plan.request.check_nodes and plan.ssh:  # nodes lost earlier, spares
            watcher = threading.Thread(target=attempts.watch_left_out, args=(self, left_out, self.over), daemon=True)
            watcher.start()
        changes = {"attempts": self.attempts or None, "restarts": attempt}
        if slurm_job:
            self.keeper.update(required=True, **changes)
        else:
            self.keeper.launched(launcher_pid=proc.pid, msg=f"run {plan.run_id} is running", **changes)
        # launch_timeout and the duration are the whole run's, every attempt in it.
        end = self.wait_for_end(proc, begun)
        if watcher is not None:  # its hands off the next attempt: it stops before that one starts
            watcher.join(timeout=PROBE_TIMEOUT + plan.request.stop_grace + 30)
        return self.conclude(proc, end, begun)

    def wait_for_end(self, proc, begun: float) -> AttemptEnd:
        """Until the launcher ends, or the attempt must be ended: launch_timeout, ranks that never
        started, a node dead or lost, a stop. How it ended (timed_out, late, ending: {name:
        Verdict}, stopped, survivors, warnings, rc; waiting: a Slurm job's state and reason before
        it was cancelled)."""
        plan, run_id, grace = self.plan, self.plan.run_id, self.plan.request.stop_grace
        slurm_job, over = plan.request.scheduler == "slurm", self.over  # made anew for each attempt
        end = AttemptEnd()
        checkpoint = None  # a node back: rank 0's stdout, read for the checkpoint
        said_not_taken: dict = {}
        everywhere = threading.Event()  # a process of the run runs on every node
        if plan.request.start_timeout and not slurm_job:
            threading.Thread(target=self.watch_start, args=(proc.pid, plan.request.start_timeout, end.late, over, everywhere),
                             daemon=True).start()
        watching = bool(plan.request.heartbeat_timeout and plan.request.check_nodes and plan.ssh and len(self.nodes) > 1)
        liveness, said_everywhere, local, progress, shown_at = None, False, None, None, 0.0
        shown: dict | None = None
        globs: dict = {}
        try:
            while True:
                # A Slurm job's nodes are watched once it runs (they are the allocation's then).
                if progress is None and (not slurm_job or proc.started):
                    progress, globs = self.progress(), self.globs()
                    local = LocalScan(progress, globs.get(plan.head, []))
                if watching and liveness is None and (not slurm_job or proc.started):
                    liveness = self.liveness = self.watch(progress, globs)
                try:
                    proc.wait(timeout=0.1)  # the run's end is seen within 0.1 s
                    # It ended by itself: a start-watch look that ran past start_timeout meanwhile
                    # judged a launcher already done, and its own end tells how the run went.
                    end.late = []
                    break
                except subprocess.TimeoutExpired:
                    pass
                if everywhere.is_set() and not said_everywhere:
                    said_everywhere = True
                    self.keeper.update(msg=f"run {run_id} runs on every node")
                if self.not_taken_back != said_not_taken:
                    said_not_taken = dict(self.not_taken_back)
                    self.keeper.update(not_taken_back=said_not_taken or None)
                if self.grow.is_set() and checkpoint is None and plan.worker_files and not slurm_job:
                    checkpoint = attempts.CheckpointWatch(plan.paths["workers"])
                if checkpoint is not None and checkpoint.seen():
                    # Right after the script's checkpoint: the next attempt, with the nodes back,
                    # starts from it and redoes nothing.
                    end.grow, self.grew = list(self.back), True
                    end.survivors = stop_launcher(proc, run_id, grace)
                    break
                end.timed_out = bool(plan.request.launch_timeout) and time.monotonic() - begun >= plan.request.launch_timeout
                found = liveness.verdicts() if liveness else {}  # one look a turn, both uses below
                end.ending = ending_of(found)
                if isinstance(proc, ReplicaGroups):  # a node lost stops no other: the groups judge it
                    proc.judge(found)
                    end.ending = {}
                    self.tell_groups(proc)
                end.stopped = _Stop.signum  # a stop heard after the launcher's end changes nothing of it
                if progress is not None:
                    now = time.monotonic()
                    if not_alive_of(found):
                        progress.not_alive(now)  # a paused or silent node's ranks cannot write
                    end.hung = progress.hung(now) if not end.ending else None
                    if now - shown_at >= PROGRESS_EVERY or end.hung:
                        shown_at, was = now, shown
                        shown = progress.shown(wall_time) or None
                        if shown != was:  # a write only for news: the record may be on a full disk
                            self.keeper.update(progress=shown)
                if end.hung:  # shown before it is ended: every rank's stacks, while they still hang
                    end.hung["stacks"] = self.keep_stacks()
                if end.timed_out or end.late or end.ending or end.stopped is not None or end.hung:
                    if end.ending:  # said at once: the end takes the stop's grace and the clean-up
                        self.keeper.update(lost_nodes={name: v.since for name, v in end.ending.items()})
                    if isinstance(proc, ReplicaGroups):
                        proc.cancel(grace)
                        end.survivors = end_run(run_id, grace, spare_guardian=True)[1]
                    elif slurm_job:
                        end.waiting = (proc.info.get("JobState"), proc.info.get("Reason"))  # before scancel
                        unsure = proc.cancel(grace, lost=[self.slurm_names[name] for name in end.ending
                                                          if name in self.slurm_names])
                        if unsure:
                            end.warnings.append(unsure)
                        end.survivors = end_run(run_id, grace, spare_guardian=True)[1]
                    else:
                        # With a node gone, mpirun waits for ever for that node's daemon: it has a
                        # moment to pass the TERM on, and the ranks on the other nodes their own grace
                        # (the clean-up after).
                        dead = all(v.state is NodeState.DEAD for v in end.ending.values())
                        end.survivors = stop_launcher(proc, run_id, grace, launcher_grace=min(
                            grace, DEAD_LAUNCHER_GRACE if dead else LOST_LAUNCHER_GRACE) if end.ending else None)
                    break
            over.set()
            end.rc = report.exit_status(proc.returncode)
            if liveness is not None:
                if end.rc != 0 and not (end.ending or end.timed_out or end.late or end.stopped or end.grow):
                    # The launcher often ends a moment after the connection that proves a node dead.
                    liveness.settle(SETTLE)
                    end.ending = liveness.ending()
                    if end.ending:
                        self.keeper.update(lost_nodes={name: v.since for name, v in end.ending.items()})
                self.not_alive = liveness.not_alive()
        finally:
            over.set()
            if isinstance(proc, ReplicaGroups):
                proc.cancel(grace)  # its end is said: nothing of it stays (a failure of the loop itself)
                self.tell_groups(proc)
            if liveness is not None:
                liveness.close()
                self.liveness = None
            if local is not None:
                local.close()
        if progress is not None and (last := progress.shown(wall_time) or None) != shown:
            self.keeper.update(progress=last)  # the stragglers named at the end are the end report's
        if end.hung and progress is not None:  # the ranks named, with the top of their stacks (hung: progress's verdict)
            taken = end.hung.pop("stacks", None) or {}
            end.hung.update(hang_named(progress, end.hung["stopped_first"], taken, wall_time))
            end.hung["stacks"] = sorted(taken)
        return end

    def tell_groups(self, groups: ReplicaGroups) -> None:
        """The replica groups' news into the record: the message, each node's group, the nodes lost."""
        news = groups.said()
        if news:
            self.keeper.update(msg=f"run {self.plan.run_id}: {news[-1]}", groups=groups.shown(),
                               lost_nodes=groups.lost() or None)

    def conclude(self, proc, end: AttemptEnd, begun: float):
        """The attempt's end, cleaned up and said: (state, message, record changes, cause)."""
        plan, paths, run_id, grace = self.plan, self.plan.paths, self.plan.run_id, self.plan.request.stop_grace
        slurm_job, rc, ending = plan.request.scheduler == "slurm", end.rc, end.ending
        interrupted = end.timed_out or end.late or ending or end.stopped or end.grow or end.hung
        survivors, warnings, slurm_cause = end.survivors, end.warnings, None
        if not interrupted:
            # The launcher is gone; nothing of the run should be left on the head.
            leftovers, survivors = end_run(run_id, grace, spare_guardian=True)
            if leftovers:
                warnings.append(f"{len(leftovers)} process(es) of run {run_id} outlived the "
                                f"launcher on the head and were stopped")
        result: dict = {"rc": rc, "duration": round(time.monotonic() - begun, 3), "timed_out": end.timed_out,
                        "warnings": warnings, "stdout_tail": report.output_tail(paths, plan.worker_files),
                        "rank0_tail": report.rank0_tail(plan.request.mode, paths)}
        # After a run that failed or was stopped, nothing of it may stay on any node. Open MPI
        # ends the ranks it started, but torchrun's workers, in process groups of their own, can
        # outlive a daemon that lost its mpirun. PALS nodes take no ssh (check_nodes false).
        ended = None
        groups = proc if isinstance(proc, ReplicaGroups) else None
        if groups is not None:  # each node's group as it ended; a lost node's may have left processes
            result.update(groups=groups.shown(), lost_nodes=groups.lost() or None)
        if (rc != 0 or interrupted or groups) and plan.request.check_nodes and len(self.nodes) > 1:
            ended = self.end_on_nodes()
            result.update(stopped_on_nodes=ended["stopped"], silent_nodes=[node["name"] for node in ended["silent"]])
        left = report.cleanup_message(ended, name_silent=not end.timed_out) if ended else ""
        causes = [verdict.cause(name, plan.request.heartbeat_timeout) for name, verdict in ending.items()]
        if end.timed_out:
            # Which nodes still answer tells a node gone silent from a run that hung by itself.
            state = "timed_out"
            result.update(rc=report.TIMED_OUT_RC)  # not the launcher's answer to TERM or KILL
            msg = report.timeout_message(run_id, plan.request.launch_timeout, grace, ended["silent"] if ended else None,
                                         paths["run"]) + left
            if slurm_job and not proc.started:
                msg = (f"Slurm job {proc.job_id} of run {run_id} never started within launch_timeout "
                       f"({plan.request.launch_timeout} s): it stayed {end.waiting[0]} ({end.waiting[1]}), and was "
                       f"cancelled")
        elif end.late:
            state, result["never_started"] = "failed", end.late
            msg = report.never_started_message(run_id, plan.request.start_timeout, end.late, paths["run"], left)
        elif ending:
            state = "failed"
            result.update(lost_nodes={name: v.since for name, v in ending.items()}, failed_host=next(iter(ending)))
            msg = report.nodes_ended_message(causes, run_id, paths["run"], left)
        elif end.hung:
            hung = end.hung
            state, since = "hung", wall_time(hung["since"])
            result.update(rc=report.HUNG_RC, hung={
                "since": since, "timeout": round(hung["allowed"]), "stopped_first": hung["stopped_first"],
                "named": hung["named"], "stacks_of": hung["stacks"],
                **({"outside_collective": hung["outside_collective"]} if hung.get("outside_collective") else {}),
                "stacks": os.path.join(paths["run"], stacks.STACKS_DIR, f"attempt_{self.attempt_number}")})
            msg = report.hung_message(run_id, since, hung["allowed"], hung["named"], paths["run"], left)
        elif end.stopped:
            state = "stopped"
            msg = report.stopped_message(run_id, end.stopped, paths["run"], left)
        elif end.grow:
            state = "failed"  # never the run's last state: the next attempt follows
            msg = f"run {run_id} ended its attempt at a checkpoint to grow to {', '.join(end.grow)}{left}"
        elif slurm_job and (said := slurm.verdict(proc.info, proc.job_id)):
            # Slurm's word, whatever ExitCode says (it says 0:0 for some of these).
            state, rc = said["state"], said["rc"]
            result.update(rc=rc, timed_out=state == "timed_out")
            slurm_cause = said["msg"] if said["restart"] else None  # a node failed, a preemption: a restart helps
            msg = f"run {run_id}: {said['msg']}; logs under {paths['run']}{left}"
        elif groups is not None:
            state = "succeeded" if rc == 0 else "failed"
            msg = f"run {run_id} {state}: {groups.message}" + ("" if rc == 0 else f"; logs under {paths['run']}{left}")
        elif rc != 0:
            state = "failed"
            failure = report.describe_failure(
                read_end(paths["launcher"]), self.nodes, plan.request.mode, paths, plan.nproc,
                read_log=self.read_log, mpich_launcher=plan.request.mpich_launcher)
            result.update(failure)
            msg = report.failure_message(run_id, rc, failure, paths) + left
            silent = {name: v.since for name, v in self.not_alive.items() if v.state is NodeState.SILENT}
            if silent:  # said first: what the ranks' failure may come from
                result["lost_nodes"] = silent
                msg = "; ".join(f"{name} stopped answering at {since}" for name, since in silent.items()) + \
                    f"; then {msg}"
            if slurm_job and proc.info.get("JobState") not in ("COMPLETED", "FAILED"):
                msg = f"Slurm ended job {proc.job_id}: {proc.info.get('JobState')} " \
                      f"({proc.info.get('Reason')}); {msg}"
        else:
            state, msg = "succeeded", f"run {run_id} succeeded"
        if survivors:
            pids = [proc_["pid"] for proc_ in survivors]
            result["survivors"] = pids
            msg += (f"; processes {', '.join(map(str, pids))} of run {run_id} survived SIGKILL on "
                    f"the head; check them (uninterruptible I/O?)")
        if groups is not None:  # each node's group restarts alone: never the whole run
            return state, msg, result, None
        if end.grow:
            return state, msg, result, f"{', '.join(end.grow)} back (grown at a checkpoint)"
        if slurm_cause:
            return state, msg, result, slurm_cause
        if end.hung:  # on the same nodes: none is at fault unless one is proven so
            return state, msg, result, f"hung: no progress since {result['hung']['since']}; stopped first: {end.hung['named']}"
        return state, msg, result, attempts.restart_cause(state, result, end.late, survivors, plan.request.final_exit_codes,
                                                          causes)

    def end_on_nodes(self) -> dict:
        """End what is left of the run on every node that answers (the nodes not alive are not
        waited on), as end_run_on_nodes says it."""
        plan = self.plan
        ended = end_run_on_nodes([node for node in self.nodes if node.name not in self.not_alive], plan.head,
                                 plan.ssh, plan.request.python, plan.run_id, plan.request.stop_grace)
        ended["silent"] += [{"name": node.name, "address": node.address, "error": "no answer on the cluster network"}
                            for node in self.nodes if node.name in self.not_alive]
        return ended

    def abort(self) -> str:
        """After a failure of the supervisor itself: end the attempt in flight on every node, as a
        stop would. What was done, for the record."""
        plan, proc = self.plan, self.proc
        self.over.set()
        said = "no launcher had started"
        if proc is not None:
            if isinstance(proc, (SlurmJob, ReplicaGroups)):
                proc.cancel(plan.request.stop_grace)
            elif proc.poll() is None:  # type: ignore[union-attr]  # else a Popen
                stop_launcher(proc, plan.run_id, plan.request.stop_grace, launcher_grace=LOST_LAUNCHER_GRACE)
            end_run(plan.run_id, plan.request.stop_grace, spare_guardian=True)
            said = "its launcher and what the run ran on the head were ended"
            if plan.request.check_nodes and plan.ssh and len(self.nodes) > 1:
                ended = self.end_on_nodes()
                said += f", and {sum(len(p) for p in ended['stopped'].values())} on the other nodes" + \
                    report.cleanup_message(ended)
        if plan.control_dir:  # the ssh masters the launch left open for mpirun, as at any end
            close_ssh_masters(plan.ssh, plan.control_dir, [node.address for node in self.nodes
                                                           if node.name != plan.head])
        return said


def hang_named(progress: Progress, stopped_first: list, taken: dict, wall) -> dict:
    """Who a hang names, from progress's verdict (`stopped_first`) and the ranks' stacks and
    flight recorders (`taken`, stacks.take): where the recorder shows ranks outside the
    collective the others entered, those are the ranks the others wait for, whether or not they
    ever printed (with `if rank == 0: print`, progress sees rank 0 alone, waiting in the
    collective). {stopped_first, named[, outside_collective]}."""
    outside = stacks.behind({rank: took.get("entered") or {} for rank, took in taken.items()})
    first = sorted(outside) or stopped_first
    top = {rank: stacks.top_frames(taken[rank]["stacks"]) for rank in first if taken.get(rank, {}).get("stacks")}
    named = progress.named(first, wall) + "".join(
        f"; rank {rank}'s stack: {' <- '.join(frames)}" for rank, frames in top.items() if frames) + "".join(
        f"; rank {rank} not in collective #{others} the others entered (its newest: #{seq}; "
        f"torch's flight recorder)" for rank, (seq, others) in outside.items())
    return {"stopped_first": first, "named": named, **({"outside_collective": sorted(outside)} if outside else {})}


def start(python: str, package_dir: str, run_dir: str, env: dict) -> subprocess.Popen:
    """Start the supervisor for the run in run_dir from the head package in `package_dir`
    (`python -S -m PACKAGE.supervisor RUN_DIR` from its parent), in a session of its own so that
    no signal meant for its starter reaches it, its output in the run's supervisor.log."""
    parent, name = os.path.split(os.path.normpath(package_dir))
    # A new run's log is new; a run restarted by hand adds to its own.
    flags = os.O_APPEND if SupervisorPlan.read(run_dir).attempts_before else os.O_CREAT | os.O_EXCL
    log = os.open(os.path.join(run_dir, "supervisor.log"), os.O_WRONLY | flags, 0o640)
    try:
        return subprocess.Popen([python, "-S", "-m", f"{name}.supervisor", run_dir], env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=parent)
    finally:
        os.close(log)


def _exit(code: int) -> None:
    """Leave at once, the record written: no thread (an ssh check, a beat) holds the exit up."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a full disk under supervisor.log: the record says how the run ended
            pass
    os._exit(code)


def main(argv: list[str]) -> int:
    run_dir = argv[0]
    # `python -m` runs it from the package's parent directory (on sys.path, as an absolute path);
    # the run's directory is the launcher's working directory where the plan names none.
    os.chdir(run_dir)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _Stop.handler)
    # A terminal closing, or the connection that started the module going, is not a stop.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    run = Run(run_dir)
    guardian_pipe = start_guardian(run_dir, run.keeper.owner)  # noqa: F841 - open for the supervisor's life
    try:
        record = attempts.supervise(run)
    except RecordRefused as refused:  # another supervisor holds the run: nothing of it is ours
        to_log(f"torchfleet: the supervisor leaves run {run.plan.run_id} alone: {refused}\n")
        _exit(1)
    except Exception as err:  # noqa: BLE001 - the run is ended and recorded, never left running
        to_log(traceback.format_exc())
        ended = run.abort()
        try:
            run.keeper.end("failed", ended=now_iso(), rc=1,
                           msg=report.supervisor_failed_message(run.plan.run_id, err, ended, run_dir))
        except Exception:  # noqa: BLE001 - its guardian records the run lost
            to_log(traceback.format_exc())
        _exit(1)
    _exit(0 if record.state == "succeeded" else 1)
    return 1


if __name__ == "__main__":
    # Run as its own program on the head, not inside a module: an exit status, not exit_json.
    raise SystemExit(main(sys.argv[1:]))
