"""fault_tolerance torchft: a run's launcher as its supervisor holds it, one torchft replica group
a node instead of one mpirun across them, so that a lost node ends no process on another.

The supervisor starts torchft's Lighthouse on the head and each node's group (its own torchrun,
renderer._torchft) over ssh, and asks `ReplicaGroups` as it would ask mpirun's Popen (`wait`,
`poll`, `returncode`, `pid`), once a turn of its wait loop, with the nodes' liveness verdicts
(`judge`). A group whose node died or whose ssh dropped is lost: the others train on (the
Lighthouse forms each step's quorum without it), and once its node answers again its group alone
is started again and heals from a live peer. A node silent past the tolerance whose group still
runs is lost until it beats again, and rejoins by itself. A group that failed on a node that
answers is restarted alone, under max_restarts counted per node. The run ends when no group
runs: 0 when every group that ended ended with 0; it fails sooner when fewer than min_nodes
groups train for restart_wait seconds. Standard library only.
"""

from __future__ import annotations

import enum
import os
import queue
import shlex
import signal
import subprocess
import threading
import time

from .launch_plan import Node
from .liveness import NodeState, node_answers, ssh_port
from .report import now_iso
from .ssh_to_nodes import end_run_on_nodes

LOOK_EVERY = 2.0  # seconds between two looks at a lost node: whether it answers again
LIGHTHOUSE_LOG = "lighthouse.log"  # in the run's directory
SSH_LOST = 255
LOSSES_KEPT = 10
CAME_BACK_WINDOW = 300.0  # a group's losses the record keeps, the last ones
# torchft's Rust side logs every quorum at INFO (a few lines a step, on every rank and in the
# Lighthouse): what it logs unless the run sets RUST_LOG itself.
RUST_LOG = "warn"  # ssh's own exit status: the connection, not the command, failed


class GroupState(enum.Enum):
    RUNNING = "running"
    LOST = "lost"  # its node dead, cut off or silent past the tolerance
    SPARE = "spare"  # a spare took its place; its node, back, is a spare now
    DONE = "done"  # ended with 0
    FAILED = "failed"  # ended otherwise, its restarts spent


class Group:  # pylint: disable=too-many-instance-attributes
    """One node's replica group: its torchrun as the head started it (a local sh, or ssh)."""

    def __init__(self, node: Node, index: int, argv: list, own_env: dict):
        self.node, self.index, self.argv, self.own_env = node, index, argv, own_env
        self.proc: subprocess.Popen | None = None
        self.state = GroupState.RUNNING
        self.starts = 0  # times its group was started
        self.restarts = 0  # restarts after a failure of its own (max_restarts)
        self.since = now_iso()  # when it took its state
        self.cause = ""  # why it was lost or failed
        self.rc: int | None = None
        self.joined = now_iso()  # when it last began training (started, or back by itself)
        self.losses: list = []  # [{since, cause}] of each loss, the last LOSSES_KEPT
        # When its processes, which outlived its loss (a pause, a cut), were back (monotonic): a
        # failure within CAME_BACK_WINDOW of it is the loss's (torchft's own time-outs expired).
        self.came_back: float | None = None
        self.replaced = False  # a spare runs its group now: its node is not started again

    def shown(self) -> dict:
        return {"group": self.index, "state": self.state.value, "starts": self.starts, "restarts": self.restarts,
                "since": self.since, "joined": self.joined, **({"cause": self.cause} if self.cause else {}),
                **({"losses": self.losses} if self.losses else {})}


class ReplicaGroups:  # pylint: disable=too-many-instance-attributes
    """The Lighthouse and each node's replica group of one run, Popen-like for the supervisor."""

    def __init__(self, run, rendered, env: dict, log_path: str):
        """`rendered`: the run's Rendered (argv: the Lighthouse's; groups: each node's argv);
        `env`: the environment they start with (the supervisor's, the run's mark kept), from
        which each group's variables are sent on its stdin."""
        self.run, self.rendered, self.log_path = run, rendered, log_path
        self.env = {"RUST_LOG": RUST_LOG, **env}
        plan = run.plan
        self.head, self.ssh, self.grace = plan.head, plan.ssh, plan.request.stop_grace
        self.fewest = max(1, plan.request.min_nodes)
        self.lighthouse: subprocess.Popen | None = None
        # The world's nodes (run.nodes) each run a group; the run's other nodes (spare_nodes) wait
        # to take a lost group's place, its REPLICA_GROUP_ID with it.
        world = {node.name: node for node in run.nodes}
        every = {node["name"]: Node.of(node) for node in plan.request.nodes or ()}
        self.groups = [Group(world[name], index, rendered.groups[name], self._own(world[name], index))
                       for index, name in enumerate(name for name in rendered.nodes if name in world)]
        self.spares = [every[name] for name in rendered.nodes if name not in world and name in every]
        self.returncode: int | None = None
        self.message = ""  # how the groups ended, for the record
        self.short_since: float | None = None  # monotonic: since when fewer than min_nodes groups train
        self.back: queue.Queue = queue.Queue()  # (group, Popen or error) from the threads that restart
        self.looking: set = set()  # names of the lost nodes a thread looks at
        self.news: list = []  # sentences for the record's message, taken by `said`
        self.ended = threading.Event()

    def _own(self, node: Node, index: int) -> dict:
        """A group's own variables on `node`: its index, the world's size, the node's interface."""
        own = {"REPLICA_GROUP_ID": str(index), "NUM_REPLICA_GROUPS": str(len(self.run.nodes))}
        return {**own, **({"GLOO_SOCKET_IFNAME": node.interface} if node.interface else {})}

    @property
    def pid(self) -> int:
        return self.lighthouse.pid if self.lighthouse else os.getpid()

    # -- starting -----------------------------------------------------------------------------

    def _popen(self, argv: list, stdin=subprocess.DEVNULL, log_path: str | None = None) -> subprocess.Popen:
        log = os.open(log_path or self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            # A session of its own: one killpg ends it and what it started here.
            return subprocess.Popen(argv, env=self.env, stdin=stdin, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=self.run.plan.cwd)
        finally:
            os.close(log)

    def _payload(self, group: Group) -> bytes:
        """The group's variables (the run's, its own, the passed and secret ones from the
        supervisor's environment, its restart count) as `export` lines for its stdin."""
        rendered = self.rendered
        values = dict(rendered.env, **group.own_env, TORCHFLEET_RESTART_COUNT=str(group.starts))
        values.setdefault("RUST_LOG", self.env.get("RUST_LOG", RUST_LOG))
        for name in (*rendered.inherit, *rendered.secrets):
            if name in self.env:
                values[name] = self.env[name]
        return "".join(f"export {name}={shlex.quote(str(value))}\n" for name, value in values.items()).encode()

    def _command(self, group: Group) -> list:
        if group.node.name == self.head:
            return group.argv
        sharing = ["-o", f"ControlPath={self.run.plan.control_dir}/%C"] if self.run.plan.control_dir else []
        return [self.ssh or "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", *sharing, group.node.address,
                shlex.join(group.argv)]

    def _start_group(self, group: Group) -> subprocess.Popen:
        proc = self._popen(self._command(group), stdin=subprocess.PIPE)
        try:
            proc.stdin.write(self._payload(group))  # type: ignore[union-attr]  # a pipe
            proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass  # it ended at once: its end is read like any
        group.starts += 1
        return proc

    def start(self) -> None:
        # Its own log: it says every quorum (a few lines a step), which is not the run's output.
        self.lighthouse = self._popen(self.rendered.argv, log_path=os.path.join(self.run.plan.paths["run"], LIGHTHOUSE_LOG))
        for group in self.groups:
            group.proc = self._start_group(group)

    # -- the supervisor's turn ----------------------------------------------------------------

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The Popen's wait: one turn of the groups' watch, then up to `timeout` s for the end."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            self._turn()
            left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if self.returncode is None and left <= 0:
                raise subprocess.TimeoutExpired("replica groups", timeout or 0)
            self.ended.wait(max(0.0, left))
        return self.returncode

    def judge(self, verdicts: dict) -> None:
        """The liveness verdicts of this turn ({name: Verdict}): a group on a node proven dead is
        lost (its ssh ended here); on a node silent past the tolerance, lost while it stays so
        (its processes there may go on, and rejoin by themselves); beating again, running."""
        for group in self.groups:
            verdict = verdicts.get(group.node.name)
            if verdict is None:
                continue
            if group.state is GroupState.RUNNING and verdict.state in (NodeState.DEAD, NodeState.LOST):
                cause = verdict.cause(group.node.name, self.run.plan.request.heartbeat_timeout)
                if verdict.state is NodeState.DEAD and group.proc is not None:
                    _end(group.proc, 0)
                    group.proc = None
                self._lose(group, cause)
            elif (group.state is GroupState.LOST and verdict.state is NodeState.ALIVE and group.proc is not None
                  and group.proc.poll() is None):
                self._set(group, GroupState.RUNNING, "")
                group.joined, group.came_back = group.since, time.monotonic()
                self.news.append(f"{group.node.name} answers again; its replica group went on and rejoins by itself")

    def _set(self, group: Group, state: GroupState, cause: str) -> None:
        group.state, group.since, group.cause = state, now_iso(), cause

    def _lose(self, group: Group, cause: str) -> None:
        self._set(group, GroupState.LOST, cause)
        group.losses = (group.losses + [{"since": group.since, "cause": cause}])[-LOSSES_KEPT:]
        if not self.spares:
            self.news.append(f"{cause}; the other replica groups train on")
            return
        # A spare takes its place at once, as its group (its index); the node lost, back, is a spare.
        spare = self.spares.pop(0)
        if group.proc is not None:  # silent, not dead: what it still runs there ends once it answers
            _end(group.proc, 0)
            group.proc = None
        group.replaced = True
        taking = Group(spare, group.index, group.argv, self._own(spare, group.index))
        taking.proc = self._start_group(taking)
        self.groups.append(taking)
        self.news.append(f"{cause}; spare {spare.name} runs its replica group now, healing from a live peer")

    def _turn(self) -> None:
        request = self.run.plan.request
        for group in self.groups:
            if group.proc is None or (rc := group.proc.poll()) is None:
                continue
            group.proc, group.rc = None, rc
            if rc == 0:
                self._set(group, GroupState.DONE, "")
            elif group.state is GroupState.LOST:
                pass  # its node's loss ended it: it starts again when the node answers
            elif group.node.name != self.head and (rc == SSH_LOST or not self._answers(group.node)):
                self._lose(group, f"{group.node.name}'s replica group lost its connection (ssh exited {rc})")
            elif group.came_back is not None and time.monotonic() - group.came_back < CAME_BACK_WINDOW:
                # Back by itself from a silence its torchft could not wait out (a quorum's
                # time-out raised): its loss ended it, not its script; it heals as a node back.
                group.came_back = None
                self.news.append(f"{group.node.name}'s replica group, back after its loss, exited with code {rc}; "
                                 f"started again, healing from a live peer")
                group.proc = self._start_group(group)
                group.joined = now_iso()
            elif group.restarts < request.max_restarts:
                group.restarts += 1
                self.news.append(f"{group.node.name}'s replica group exited with code {rc}; restarted alone "
                                 f"({group.restarts} of max_restarts {request.max_restarts})")
                group.proc = self._start_group(group)
            else:
                self._set(group, GroupState.FAILED, f"{group.node.name}'s replica group exited with code {rc}"
                          + (f" after {group.restarts} restart(s)" if group.restarts else ""))
                self.news.append(group.cause)
        for group in self.groups:
            if group.state is GroupState.LOST and group.proc is None and group.node.name not in self.looking:
                self.looking.add(group.node.name)
                threading.Thread(target=self._bring_back, args=(group,), daemon=True).start()
        while not self.back.empty():
            group, proc = self.back.get()
            self.looking.discard(group.node.name)
            if group.replaced:  # its node answers again, nothing of the run left there: a spare
                self._set(group, GroupState.SPARE, "")
                self.spares.append(group.node)
                self.news.append(f"{group.node.name} answers again: a spare now")
            elif isinstance(proc, subprocess.Popen):
                group.proc = proc
                self._set(group, GroupState.RUNNING, "")
                group.joined = group.since
                self.news.append(f"{group.node.name} answers again: its replica group started again "
                                 f"(start {group.starts}), healing from a live peer")
                self.run.rewatch(group.node.name)
        self._judge_end(request.restart_wait)

    def _answers(self, node: Node) -> bool:
        return node_answers(node.address, ssh_port(self.ssh or "ssh", node.address), timeout=1.0)

    def _bring_back(self, group: Group) -> None:
        """In a thread: once the lost node answers (and takes ssh), end what is left of the run
        there and start its group again; handed back through `back`."""
        node = group.node
        while not self.ended.is_set():
            if self._answers(node):
                ended = end_run_on_nodes([node], self.head, self.ssh, self.run.plan.request.python,
                                         self.run.plan.run_id, self.grace)
                if not ended["silent"] and not self.ended.is_set():
                    self.back.put((group, None if group.replaced else self._start_group(group)))
                    return
            self.ended.wait(LOOK_EVERY)

    def _judge_end(self, restart_wait: int) -> None:
        """The end once no group runs and one has ended (0 unless one failed); a failure once
        fewer than min_nodes groups train, none done, for restart_wait seconds."""
        running = [g for g in self.groups if g.state is GroupState.RUNNING]
        done = [g for g in self.groups if g.state is GroupState.DONE]
        failed = [g for g in self.groups if g.state is GroupState.FAILED]
        if not running and (done or failed):
            lost = [g.node.name for g in self.groups if g.state is GroupState.LOST]
            gone = f" ({', '.join(lost)} lost, not back before the end)" if lost else ""
            if failed:
                self._end(failed[0].rc or 1, "; ".join(g.cause for g in failed) + gone)
            else:
                self._end(0, "every replica group ended with 0" + gone)
            return
        if len(running) >= self.fewest or done:
            self.short_since = None
        elif self.short_since is None:
            self.short_since = time.monotonic()
        elif time.monotonic() - self.short_since >= restart_wait:
            out = [f"{g.node.name} ({g.cause or g.state.value})" for g in self.groups if g.state is not GroupState.RUNNING]
            self._end(1, f"fewer than min_nodes ({self.fewest}) replica groups trained for restart_wait "
                         f"({restart_wait} s): {', '.join(out)}")

    def _end(self, rc: int, message: str) -> None:
        self.returncode, self.message = rc, message
        self.stop(self.grace)
        self.ended.set()

    def said(self) -> list:
        """The news since the last call (the supervisor puts it in the record)."""
        news, self.news = self.news, []
        return news

    def shown(self) -> dict:
        """{node: its group as the record shows it}: a node's latest group."""
        return {group.node.name: group.shown() for group in self.groups}

    def lost(self) -> dict:
        """{node: since} of the nodes lost during the run (the last loss of each), back or not."""
        return {g.node.name: g.losses[-1]["since"] for g in self.groups if g.losses}

    def stop(self, grace: float) -> None:
        """End the groups' processes here (their ssh, the head's torchrun) and the Lighthouse:
        TERM, KILL after `grace`. What runs on the other nodes the supervisor's clean-up ends."""
        procs = [g.proc for g in self.groups if g.proc is not None] + ([self.lighthouse] if self.lighthouse else [])
        for proc in procs:
            _signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in procs:
            _end(proc, max(0.0, deadline - time.monotonic()))

    def cancel(self, grace: float) -> None:
        """A stop of the run: the groups end now (the returncode a stop's, 143)."""
        if self.returncode is None:
            self._end(143, "stopped")


def _signal(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except OSError:
        pass


def _end(proc: subprocess.Popen, grace: float) -> None:
    if proc.poll() is None:
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        _signal(proc, signal.SIGKILL)
        proc.wait()
