"""A run's attempts and its restart policy: attempt after attempt until one ends in a way a
restart cannot help, or max_restarts is spent. Between two attempts (the record `restarting`):
the nodes that answer, with nothing of the run left on them and no other run alive there, once
min_nodes do; a rendezvous port free on the head; the request rendered again for them."""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import shlex
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType

from .ssh_to_nodes import PROBE_FANOUT, PROBE_TIMEOUT, close_ssh_masters, end_run_on_nodes, probe_nodes, withdraw_from_board
from .liveness import node_answers, ssh_port
from .node_checks import head_copies, rejoin_problem, rejoin_request
from .ports import port_in_use
from .probe import board_answer
from .processes import end_run, find_run_processes
from .record import RunRecord, SupervisorPlan, node_workers, reserve_space
from .report import now_iso
from .launch_plan import Node, plan_of_run
from .renderer import render
from . import slurm
from .slurm_job import next_job
from .tail import DONE, WHOLE, Tail

RESTART_VAR = "TORCHFLEET_RESTART_COUNT"  # the attempt's number, for the script (0: the first)
WAIT_EVERY = 3.0  # seconds between two looks for the nodes of a restart
KNOCK_TIMEOUT = 2.0  # seconds a node has to answer on its ssh port before it is asked over ssh
PORTS_TRIED = 100  # rendezvous ports tried above the attempt's own before a restart gives up
# A line of rank 0's stdout that begins with this: the script's checkpoint is complete, so an
# attempt ended right after it redoes nothing (the run grows to a node back then).
CHECKPOINT_MARK = b"TORCHFLEET_CHECKPOINT"
RECHECK_EVERY = 30.0  # seconds before a node back that failed the checks is checked again
# Seconds between two announcements of the run on the nodes it holds without running on them
# (spares, nodes left out): within board.STARTING_FOR, so its entries there never lapse.
BOARD_EVERY = 60.0


def supervise(run) -> RunRecord:
    """The run, attempt after attempt (max_restarts), to its last record."""
    plan = run.plan
    reserve_space(run.run_dir)
    first = plan.attempts_before
    run.keeper.begin("restarting" if first else "starting", attempts=run.attempts or None,
                     restarts=len(run.attempts))
    attempt, begun, grows = first, time.monotonic(), 0
    if attempt:  # restarted by hand: the nodes that answer, fenced, as after a failure
        nodes = nodes_for_restart(run)
        if isinstance(nodes, str):
            state = "stopped" if run.stop_requested() is not None else "failed"
            return run.keeper.end(state, ended=now_iso(), rc=143 if state == "stopped" else 1,
                                  msg=f"run {plan.run_id} was not restarted: {nodes}")
        next_attempt(run, attempt, nodes, run.attempts[-1]["cause"])
    while True:
        ended = run.attempt(attempt, begun)
        if ended is None:  # its launcher could not start: recorded
            return run.keeper.record
        state, msg, result, cause = ended
        # Growing to a node back is no failure: it spends nothing of max_restarts.
        spent = attempt - first - grows
        if cause is None or run.stop_requested() is not None or (not run.grew and spent >= plan.request.max_restarts):
            break
        grows += bool(run.grew)
        # A hung attempt keeps its verdict (the ranks that stopped first, where their stacks are).
        run.attempts[-1].update(ended=now_iso(), cause=cause, **({"hung": result["hung"]} if result.get("hung") else {}))
        run.keeper.restarting(attempts=run.attempts, msg=f"attempt {attempt} of run {plan.run_id} ended ({cause}); "
                                                         f"waiting for {plan.fewest_nodes} node(s) to answer")
        nodes = nodes_for_restart(run)
        if isinstance(nodes, str):
            if run.stop_requested() is not None:
                state, result["rc"] = "stopped", result.get("rc") or 143
            msg = f"{msg}; no restart: {nodes}"
            break
        attempt += 1
        next_attempt(run, attempt, nodes, cause)
    if run.attempts:
        run.attempts[-1].update(ended=now_iso(), cause="" if state == "succeeded" else (cause or msg))
        result.update(attempts=run.attempts, restarts=len(run.attempts) - 1)
    # The last attempt's nodes are free for another account's launch now, not STARTING_FOR after
    # the launch (a node lost or silent is not waited for).
    withdraw_from_board([Node.of(node) for node in plan.request.nodes if node["name"] not in run.not_alive],
                        plan.head,
                        plan.ssh if plan.request.check_nodes else None, plan.request.python, plan.run_id, plan.control_dir)
    if plan.control_dir:
        close_ssh_masters(plan.ssh, plan.control_dir, [node.address for node in run.nodes if node.name != plan.head])
    return run.keeper.end(state, msg=msg, ended=now_iso(), **result)


def restart_cause(state: str, result: dict, late, survivors, final_exit_codes, node_causes=()) -> str | None:
    """Why an attempt failed, where a restart can help: a node dead or lost (`node_causes`, each
    naming its node), a rank killed by a signal or exiting non-zero (but with one of
    `final_exit_codes`); None for any other end (success, a stop, a timeout, ranks that never
    started, processes that survive SIGKILL)."""
    if state != "failed" or late or survivors:
        return None
    if node_causes:
        return "; ".join(node_causes)
    if result.get("lost_nodes"):
        return "; ".join(f"{name} stopped answering at {since}" for name, since in result["lost_nodes"].items())
    code = result.get("failed_exit_code")
    if code is not None and code in final_exit_codes:
        return None
    if result.get("failed_rank") is not None:
        return f"rank {result['failed_rank']} on {result.get('failed_host')} exited with code {code}"
    return f"the launcher exited with code {result.get('rc')}"


def earlier_attempts(record: dict, plan: SupervisorPlan) -> list:
    """The attempts of a run restarted by hand, as its record lists them; a run that had no
    restarts allowed lists none, and its one attempt is made from the record itself."""
    if record.get("attempts"):
        return [dict(attempt) for attempt in record["attempts"]]
    return [{"attempt": 0, "started": record.get("started"), "ended": record.get("ended"),
             "nodes": record.get("nodes") or [node["name"] for node in plan.nodes],
             "world_size": record.get("world_size"),
             "cause": restart_cause("failed", record, record.get("never_started"), record.get("survivors"), [])
             if record.get("state") == "failed" else record.get("msg") or record.get("state"),
             "workers": plan.paths.get("workers") or None}]


def attempt_size(plan: SupervisorPlan) -> int:
    """The nodes an attempt uses at most: every node of the run but its spares."""
    if plan.world_nodes:
        return plan.world_nodes
    return len(plan.request.nodes or ())


def spares(names: list, head: str | None, count: int) -> list:
    """The run's spare nodes: the last `count` of its nodes (in the run's order), never the head."""
    others = [name for name in names if name != head]
    return others[len(others) - count:] if count else []


def attempt_nodes(ready: list, previous: list, size: int) -> list:
    """The nodes of the next attempt, of those `ready` (names, in the run's order): the last
    attempt's first, so that a lost node is replaced (by a spare, or a node back) rather than
    the world reshuffled, then the others, up to `size`; in the run's order."""
    chosen = [name for name in ready if name in previous][:size]
    chosen += [name for name in ready if name not in chosen][:size - len(chosen)]
    return [name for name in ready if name in chosen]


def free_port(port: int) -> int | None:
    """`port` if nothing listens on it on the head, else the next free one above it; None if
    none of PORTS_TRIED is."""
    return next((candidate for candidate in range(port, port + PORTS_TRIED) if not port_in_use(candidate)), None)


def board_request(run) -> dict:
    """The run's board entry, as the launch announced it, for every node an attempt is about to
    use or holds (spares): another account's launch onto them is refused while the run lives."""
    plan = run.plan
    share = plan.request.shares_nodes
    entry = {"run_id": plan.run_id, "head": plan.head, "nodes": [node["name"] for node in plan.request.nodes],
             "world_size": plan.world_size, "started": getattr(run.keeper.record, "started", None) or now_iso()}
    return {"entry": entry, "share": share}


def ready_nodes(run, asked) -> tuple[list, dict]:
    """Of the nodes `asked`: those alive (they run a command over ssh, not only answer the knock:
    a hung node's kernel answers it too), with what is left of this run on them ended, and no
    other run alive there; and {name: [run ids]} of those another run holds."""
    plan = run.plan
    others = [node for node in asked if node.name != plan.head]
    with ThreadPoolExecutor(max_workers=min(PROBE_FANOUT, len(others) or 1)) as pool:
        knocked = list(pool.map(lambda n: node_answers(n.address, ssh_port(plan.ssh or "ssh", n.address),
                                                       timeout=KNOCK_TIMEOUT), others))
    reachable = [node for node, ok in zip(others, knocked) if ok]
    # The run's files too: a node left out at the launch (it did not answer) never got them.
    # Announced on the board first, then read: a node another account's launch took meanwhile is busy.
    board = board_request(run)
    request = {"board": board, "expect": (plan.node_checks or {}).get("expect") or {},
               "stop": {"run_id": plan.run_id, "grace": plan.request.stop_grace}}
    answers = probe_nodes(reachable, plan.head, plan.ssh, plan.request.python, {node.name: request for node in reachable},
                          timeout=plan.request.stop_grace + 20, connect_timeout=5,
                          control_dir=plan.control_dir) if reachable and plan.request.check_nodes else {}
    if not plan.request.check_nodes:  # the other nodes take no ssh from the head: the knock alone
        answers = {node.name: {"runs": []} for node in reachable}
    if any(node.name == plan.head for node in asked):
        end_run(plan.run_id, plan.request.stop_grace, spare_guardian=True)
        answers[plan.head] = {"runs": find_run_processes(), **board_answer(**board)}
    ready, busy = [], {}
    for node in asked:
        answer = answers.get(node.name)
        if answer is None or "error" in answer:
            continue
        held = sorted({proc["run_id"] for proc in answer["runs"] if proc["run_id"] != plan.run_id})
        if not board["share"]:
            held += [f"{entry['run_id']} of {entry['account']}" for entry in answer.get("others") or []]
            held += [answer["board_full"]] if answer.get("board_full") else []
        if held:
            busy[node.name] = held
        elif not give_files(run, node, answer.get("stale")):
            ready.append(node)
    return ready, busy


def nodes_for_restart(run):
    """The nodes of the next attempt: every node of the run that is alive and free (in the run's
    order), once min_nodes are, with whatever is left of the run on them ended first (a node back
    with stale ranks among them). Past restart_wait, or on a stop, a sentence saying why there are
    none."""
    plan = run.plan
    every = [Node.of(node) for node in plan.request.nodes]
    deadline = time.monotonic() + plan.request.restart_wait
    # The nodes just found dead or silent are asked first only when the others are too few: a
    # hung node would hold the round up for the ssh timeout.
    others = [node for node in every if node.name not in run.not_alive]
    asked = others if len(others) >= plan.fewest_nodes else every
    busy: dict = {}
    while run.stop_requested() is None:
        ready, busy = ready_nodes(run, asked)
        down = slurm_refuses(run, ready)
        ready = [node for node in ready if node.name not in down]
        if len(ready) >= plan.fewest_nodes:
            return attempt_nodes([node.name for node in ready], [node.name for node in run.nodes], attempt_size(plan))
        if time.monotonic() >= deadline:
            missing = [node.name for node in every if node not in ready]
            held = "".join(f"; {name} runs {', '.join(ids)} (stop it first: torchfleet stop RUN_ID)"
                           for name, ids in busy.items())
            held += "".join(f"; {name} is {state} in Slurm (scontrol update nodename={run.slurm_names[name]} "
                            f"state=resume, once it is fixed)" for name, state in down.items())
            return (f"{len(ready)} node(s) answered, fewer than min_nodes ({plan.fewest_nodes}), within "
                    f"restart_wait ({plan.request.restart_wait} s); missing: {', '.join(missing)}{held}")
        asked = every
        time.sleep(WAIT_EVERY)
    return "stopped while waiting for the nodes of a restart"


def slurm_refuses(run, nodes) -> dict:
    """{name: Slurm's state} of those of `nodes` that Slurm gives no new job (down, drained): a
    node Slurm failed answers ssh, but a job asking for it would pend for ever. Under Slurm only,
    and only for nodes an allocation of the run named (their Slurm names are known)."""
    if run.plan.request.scheduler != "slurm" or not any(node.name in run.slurm_names for node in nodes):
        return {}
    down = slurm.unusable_nodes()
    return {node.name: down[run.slurm_names[node.name]] for node in nodes
            if run.slurm_names.get(node.name) in down}


def next_attempt(run, attempt: int, names: list, cause: str) -> None:
    """Render the run's request again for attempt `attempt` on the nodes `names`: its own
    rendezvous port (free on the head, and never an attempt's before, so nothing of one can join
    it), hostfile and worker log directory, and TORCHFLEET_RESTART_COUNT for the script."""
    base = plan_of_run(run.plan)
    previous = [node.name for node in run.nodes]
    workers = f"{base.node_log_dir}.{attempt}" if base.node_log_dir else None
    first = base.request.master_port
    port = free_port(max(first + attempt, (run.port or 0) + 1))
    if port is None:
        raise RuntimeError(f"no free rendezvous port on the head from {first + attempt} to "
                           f"{first + attempt + PORTS_TRIED - 1}")
    plan = dataclasses.replace(
        base, request=base.request.with_changes(master_port=port),
        nodes=tuple(node for node in base.nodes if node.name in names),
        hostfile_path=f"{run.run_dir}/hostfile.{attempt}", node_log_dir=workers,
        env_set=MappingProxyType({**base.env_set, RESTART_VAR: str(attempt)}))
    rendered = render(plan)
    by_name = {node["name"]: node for node in run.plan.request.nodes}
    order = [by_name[name] for name in rendered.nodes]
    if run.plan.request.scheduler == "slurm":
        argv = next_job(run, attempt, plan, [name for name in by_name if name not in names])
        changes = {"argv": argv, "sbatch": argv, "command": shlex.join(argv)}
    else:
        with open(plan.hostfile_path, "w", encoding="utf-8") as handle:
            handle.write(rendered.hostfile)
        changes = {"argv": rendered.argv, "command": rendered.command}
    run.plan = dataclasses.replace(
        run.plan, world_size=rendered.world_size, nodes=order, paths={**run.plan.paths, "workers": workers or ""},
        **changes)
    run.nodes = [Node.of(node) for node in order]
    for name in rendered.nodes:  # in the attempt now: no longer a node "not taken back"
        run.not_taken_back.pop(name, None)
    run.launcher_env = rendered.env
    run.port = port
    # A lost node replaced by a spare or a node back, or nodes added: named in the record.
    run.joined = [name for name in rendered.nodes if name not in previous]
    run.left = [name for name in previous if name not in rendered.nodes]
    swap = ", ".join([f"{name} in" for name in run.joined] + [f"{name} out" for name in run.left])
    said = (f"torchfleet: attempt {attempt} of run {run.plan.run_id} begins at {now_iso()} on "
            f"{', '.join(rendered.nodes)} (world size {rendered.world_size}, port {port}{'; ' + swap if swap else ''}); attempt "
            f"{attempt - 1} ended: {cause}\n")
    with open(run.plan.paths["launcher"], "a", encoding="utf-8") as log:
        log.write(said)
    run.keeper.update(nodes=list(rendered.nodes), slots=[node["slots"] for node in order],
                      world_size=rendered.world_size, command=run.plan.command, restarts=attempt,
                      msg=said.strip()[len("torchfleet: "):])
    run.over = threading.Event()  # the attempt that begins: set when it ends


def _say(plan: SupervisorPlan, words: str) -> None:
    with open(plan.paths["launcher"], "a", encoding="utf-8") as log:
        log.write(f"torchfleet: {words}\n")


def watch_left_out(run, names: list, over: threading.Event) -> None:
    """In a thread, for an attempt: the nodes of the run it does not use (lost before, spares),
    each ended of whatever of the run it still runs once it answers again (a node back on the
    network with its stale ranks), which the launcher log says. Where the attempt is short of
    the run's world (a node lost and no spare for it), a node back that has kept answering for
    rejoin_after seconds and passes the launch's checks is put in `run.back`, and `run.grow` set:
    the run grows to it at the script's next checkpoint (Run.wait_for_end). One that fails a
    check is named in `run.not_taken_back`, and checked again later."""
    plan = run.plan
    back_now, grow = run.back, run.grow  # this attempt's own: the next one gets new ones
    pending = {node["name"]: Node.of(node) for node in plan.request.nodes if node["name"] in names}
    shrunk = len(run.nodes) < attempt_size(plan) and bool(plan.request.max_restarts) and plan.request.scheduler != "slurm"
    # The checkpoint that a growth waits for is read in torchrun's files of rank 0: a run without
    # them (rank mode) does not grow, and says so once a node is back.
    short = shrunk and bool(plan.worker_files)
    answering: dict[str, float] = {}  # {name: since when it answers (monotonic)}
    failed: dict[str, float] = {}  # {name: when a check failed}
    announced = time.monotonic()  # the attempt's nodes were announced as it began
    while pending and not over.wait(WAIT_EVERY):
        if plan.request.check_nodes and time.monotonic() - announced >= BOARD_EVERY:
            announced = time.monotonic()
            board = board_request(run)
            probe_nodes(list(pending.values()), plan.head, plan.ssh, plan.request.python,
                        {name: {"board": board} for name in pending}, timeout=PROBE_TIMEOUT, connect_timeout=5,
                        control_dir=plan.control_dir)
            if over.is_set():
                break
        knocked = {name: node_answers(node.address, ssh_port(plan.ssh or "ssh", node.address), timeout=KNOCK_TIMEOUT)
                   for name, node in pending.items()}
        for name in [name for name, ok in knocked.items() if not ok]:
            answering.pop(name, None)
            run.not_taken_back.pop(name, None)  # said of a node back: it is not back now
        back = [pending[name] for name, ok in knocked.items() if ok and name not in answering]
        # Each act checks first that its attempt still runs: the next may use these nodes already.
        if back and not over.is_set():
            done = end_run_on_nodes(back, plan.head, plan.ssh, plan.request.python, plan.run_id, plan.request.stop_grace)
            silent = {node["name"] for node in done["silent"]}
            for node in back:
                if node.name not in silent:  # it runs a command: not only its kernel answering the knock
                    answering[node.name] = time.monotonic()
                    _say(plan, f"{node.name} answers again at {now_iso()}; what it still ran of run "
                               f"{plan.run_id} was ended ({len(done['stopped'].get(node.name, []))} process(es))"
                               + ("; the run does not grow to it in rank mode (no torchrun files to see its "
                                  "checkpoint in): it is taken back at the next restart" if shrunk and not short else ""))
        if not short:  # the world is whole: a node back is a spare again
            pending = {name: node for name, node in pending.items() if name not in answering}
            continue
        now = time.monotonic()
        settled = [pending[name] for name, since in answering.items()
                   if now - since >= plan.request.rejoin_after and now - failed.get(name, -RECHECK_EVERY) >= RECHECK_EVERY]
        if not settled:
            continue
        answers = probe_nodes(settled, plan.head, plan.ssh, plan.request.python,
                              {node.name: rejoin_request(plan.node_checks) for node in settled},
                              timeout=PROBE_TIMEOUT, connect_timeout=5, control_dir=plan.control_dir)
        for node in settled:
            if over.is_set():  # the attempt ended while they were asked: never grow the next one
                return
            answer = answers.get(node.name, {"error": "no answer"})
            problem = rejoin_problem(node, answer, plan.run_id) or give_files(run, node, answer.get("stale"))
            if problem:
                failed[node.name] = now
                run.not_taken_back[node.name] = problem
                _say(plan, f"{node.name} is back but is not taken back into run {plan.run_id}: {problem}")
                continue
            run.not_taken_back.pop(node.name, None)
            back_now.append(node.name)
            del pending[node.name]
            grow.set()
            _say(plan, f"{node.name} is back and passes the launch's checks at {now_iso()}: run {plan.run_id} "
                       f"grows to it at its next checkpoint ({CHECKPOINT_MARK.decode()} on rank 0's stdout)")


def give_files(run, node, stale) -> str | None:
    """Put the run's files that `node` lacks there (it was away when the launch sent them), from
    the head's own copies; why not, where they cannot be."""
    if not stale:
        return None
    plan = run.plan
    found, changed = head_copies(stale, (plan.node_checks or {}).get("expect") or {})
    if changed:
        return f"the run's files differ there, and the head's copies changed since the launch: {', '.join(changed)}"
    answer = probe_nodes([node], plan.head, plan.ssh, plan.request.python, {node.name: {"write": found}},
                         timeout=PROBE_TIMEOUT, connect_timeout=5, control_dir=plan.control_dir)[node.name]
    return f"the run's files could not be put there: {answer['error']}" if "error" in answer else None


ATTEMPT_DIR = re.compile(r"/attempt_(\d+)/")


def is_checkpoint_mark(line: bytes) -> bool:
    """Whether a line of rank 0's is the script's word that its checkpoint is complete: the mark as
    a whole word at the line's start (TORCHFLEET_CHECKPOINT_DIR=... is not it)."""
    return line.startswith(CHECKPOINT_MARK) and line[len(CHECKPOINT_MARK):len(CHECKPOINT_MARK) + 1] in (b"", b" ", b"\t", b"\r", b"\n")


class CheckpointWatch:
    """Rank 0's stdout on the head (torchrun's file of worker 0 on node 0), read from now on for
    a line that begins with CHECKPOINT_MARK."""

    def __init__(self, workers: str):
        self.pattern = os.path.join(glob.escape(node_workers(workers, 0)), "*", "attempt_*", "0", "stdout.log")
        self.tail: Tail | None = None
        self.first_look = True

    def seen(self) -> bool:
        if self.tail is None:  # the newest of torchrun's attempts, by number (attempt_10 after attempt_9)
            found = sorted(glob.glob(self.pattern), key=lambda path: int(ATTEMPT_DIR.findall(path)[0]))
            first, self.first_look = self.first_look, False
            if not found:
                return False
            self.tail = Tail(found[-1], os.path.getsize(found[-1]) if first else 0)
        while True:
            pieces, more = self.tail.pieces()
            if any(kind in (WHOLE, DONE) and is_checkpoint_mark(text) for kind, text in pieces):
                return True
            if not more:
                return False
