"""A run's guardian: a small process beside its supervisor that ends the run if the supervisor
dies without recording its end (SIGKILL, the OOM killer, a failure of its own), and records it
`lost`. It acts only for its own supervisor: a run that a restart has taken since is not its.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from . import report, slurm
from .launch_plan import Node
from .ssh_to_nodes import close_ssh_masters, end_run_on_nodes, withdraw_from_board
from .processes import end_run
from .record import SupervisorPlan
from .transitions import Owner, abandon, read_raw


def start_guardian(run_dir: str, owner: Owner) -> int:
    """Start the run's guardian (`python -m PACKAGE.guardian RUN_DIR PID START BOOT`): a process
    of its own session that reads a pipe whose only writer is the supervisor `owner`. The pipe
    ends when the supervisor does, however it ends. It carries the supervisor's mark (a stop ends
    it with the supervisor; no watch counts it as a rank). Returns the pipe's write end, kept open
    (never inherited: Python's descriptors are not) for the supervisor's life."""
    read_end_, write_end = os.pipe()
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    log = os.open(os.path.join(run_dir, "supervisor.log"), os.O_WRONLY | os.O_APPEND)
    try:
        subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, "-S", "-m", f"{__package__}.guardian", run_dir, str(owner.pid), str(owner.start),
             owner.boot], env=dict(os.environ), stdin=read_end_, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=package_parent)
    finally:
        os.close(read_end_)
        os.close(log)
    return write_end


def end_everywhere(plan: SupervisorPlan, record: dict | None) -> dict:
    """End the run as a stop would, on the head and on every node the head reaches; the
    record's changes that say what was done."""
    problems = []
    job = (record or {}).get("job_id")
    if plan.request.scheduler == "slurm":
        for job_id in [job] if job else [found["job_id"] for found in slurm.run_jobs({plan.run_id})]:
            try:
                slurm.cancel(job_id)
            except slurm.SlurmError as err:
                problems.append(str(err))
    stopped, survivors = end_run(plan.run_id, plan.request.stop_grace)
    ended = None
    # Every node of the request: a spare or a node taken back may run a later attempt.
    nodes = [Node.of(node) for node in plan.request.nodes or ()]
    if plan.request.check_nodes and plan.ssh and len(nodes) > 1:
        ended = end_run_on_nodes(nodes, plan.head, plan.ssh, plan.request.python, plan.run_id, plan.request.stop_grace)
    if survivors:
        problems.append(f"processes {', '.join(str(p['pid']) for p in survivors)} survived SIGKILL on the head")
    withdraw_from_board(nodes, plan.head, plan.ssh if plan.request.check_nodes else None, plan.request.python, plan.run_id,
                        plan.control_dir)
    if plan.control_dir:
        close_ssh_masters(plan.ssh, plan.control_dir, [n.address for n in nodes if n.name != plan.head])
    return {"stopped": stopped, "ended": ended, "problems": problems, "survivors": survivors}


def guard(run_dir: str, owner: Owner) -> int:
    """Wait for the supervisor's end; if it left its run active, end the run everywhere and
    record it lost."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while os.read(0, 4096):
        pass
    plan = SupervisorPlan.read(run_dir)

    def clean_up():
        died = report.now_iso()
        done = end_everywhere(plan, read_raw(run_dir))
        return {"ended": died, "msg": report.guardian_message(plan.run_id, died, done, run_dir),
                "stopped_on_nodes": done["ended"]["stopped"] if done["ended"] else None,
                "silent_nodes": [node["name"] for node in done["ended"]["silent"]] if done["ended"] else None,
                "survivors": [proc["pid"] for proc in done["survivors"]] or None}
    abandon(run_dir, owner, clean_up)
    return 0


def main(argv: list[str]) -> int:
    run_dir, pid, start, boot = argv
    return guard(run_dir, Owner(int(pid), int(start) if start != "None" else None, boot))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
