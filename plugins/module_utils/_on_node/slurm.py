"""Slurm, as the launch reads and drives it on the head: partitions, a job's state, its exit code,
the checks made before anything is submitted, and submitting and cancelling. Standard library
only: the run's supervisor uses it outside Ansible."""

from __future__ import annotations

import re
import subprocess
import time

# Job states after which nothing of the job runs (squeue(1) "JOB STATE CODES").
ENDED = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
                   "OUT_OF_MEMORY", "PREEMPTED", "SPECIAL_EXIT", "TIMEOUT"})
# How a job that ended in each of those states ends its run (a job COMPLETED or FAILED is read from
# its ranks, as any launcher's end): (the record's state, the exit code `wait` gives, whether a
# restart under max_restarts can help, Slurm's word in the report). Whatever ExitCode says: Slurm
# reports 0:0 for some of these (a TIMEOUT, a CANCELLED, a NODE_FAIL, by version and setup).
VERDICTS = {
    "TIMEOUT": ("timed_out", 124, False, "it reached its time limit"),
    "DEADLINE": ("timed_out", 124, False, "it reached its deadline"),
    "NODE_FAIL": ("failed", 1, True, "a node of its allocation failed"),
    "BOOT_FAIL": ("failed", 1, True, "a node of its allocation failed to boot"),
    "PREEMPTED": ("failed", 1, True, "it was preempted by another job"),
    "CANCELLED": ("stopped", 143, False, "it was cancelled outside torchfleet (scancel)"),
    "OUT_OF_MEMORY": ("failed", 137, False, "it ran out of the memory its allocation grants"),
    "SPECIAL_EXIT": ("failed", 1, False, "it ended in Slurm's special exit state"),
}
# What sbatch --time accepts: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_TIME = re.compile(r"^(?:\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(?::\d{1,2}(?::\d{1,2})?)?)$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
COMMAND_TIMEOUT = 30


class SlurmError(Exception):
    """What Slurm said no to, or could not be asked; the message names the fix."""


def check_time_limit(value: str) -> None:
    """Refuse a time limit sbatch would reject (its formats, above zero) or UNLIMITED."""
    text = str(value).strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return
    if not _TIME.match(text) or not any(ch not in "0-:" for ch in text):
        raise SlurmError(f"slurm_time_limit {value!r} is not a Slurm time limit: give minutes (90), "
                         f"HH:MM:SS (01:30:00) or D-HH:MM:SS (1-00:00:00), above zero")


def check_name(value: str, what: str) -> None:
    if not _NAME.match(str(value)):
        raise SlurmError(f"{what} {value!r} is not a Slurm name: letters, digits, '_', '.' and '-' only")


def minutes(limit: str) -> float | None:
    """A time limit in minutes; None for UNLIMITED (sbatch's reading of each format)."""
    text = limit.strip().upper()
    if text in ("UNLIMITED", "INFINITE"):
        return None
    days = 0
    if "-" in text:
        head, text = text.split("-", 1)
        days = int(head)
        parts = [int(p) for p in text.split(":")] + [0, 0]
        return days * 1440 + parts[0] * 60 + parts[1] + parts[2] / 60
    parts = [int(p) for p in text.split(":")]
    if len(parts) == 1:
        return float(parts[0])
    if len(parts) == 2:
        return parts[0] + parts[1] / 60
    return parts[0] * 60 + parts[1] + parts[2] / 60


def _scontrol(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)


def fields(text: str) -> dict:
    """`scontrol show ... -o` output, one record, as {Key: value}."""
    found = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key not in found:
            found[key] = value
    return found


def partitions() -> dict:
    """{name: {Key: value}} of every partition; "default" names the default one."""
    done = _scontrol("show", "partition", "-o")
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()
        raise SlurmError(f"scontrol cannot read the partitions ({said}): is slurmctld running, and "
                         f"does munge answer on the head?")
    found = {}
    for line in done.stdout.splitlines():
        info = fields(line)
        if "PartitionName" in info:
            found[info["PartitionName"]] = info
    return found


# A node's State flags (scontrol show node) under which Slurm gives it no new job.
UNUSABLE = frozenset({"DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "FUTURE", "INVAL"})


def unusable_nodes() -> dict:
    """{Slurm node name: "STATE (reason)"} of the nodes Slurm gives no new job (down, drained,
    failing): a restart's job leaves them out, or it would pend for them. {} where Slurm cannot
    be asked: the job itself then says what it waits for."""
    try:
        done = _scontrol("show", "node", "-o")
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found = {}
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        info = fields(line)
        state = info.get("State", "")
        if "NodeName" in info and UNUSABLE & set(state.split("+")):
            reason = info.get("Reason")
            found[info["NodeName"]] = state + (f" ({reason})" if reason and reason != "(null)" else "")
    return found


def check_partition(name: str | None, nodes: int, time_limit: str | None) -> str:
    """The partition a job of `nodes` nodes goes to (`name`, else the default); refuses one
    Slurm does not have, one that is not up, one with fewer nodes, a time above its limit."""
    found = partitions()
    if name:
        check_name(name, "slurm_partition")
        info = found.get(name)
        if info is None:
            raise SlurmError(f"Slurm has no partition {name!r} (it has {', '.join(sorted(found)) or 'none'}); "
                             f"name one of them in slurm_partition, or leave it unset for the default")
    else:
        default = [info for info in found.values() if info.get("Default") == "YES"]
        if not default:
            raise SlurmError(f"Slurm has no default partition: name one in slurm_partition "
                             f"({', '.join(sorted(found)) or 'none'})")
        info = default[0]
    partition = info["PartitionName"]
    if info.get("State", "UP") != "UP":
        raise SlurmError(f"Slurm partition {partition} is {info['State']}: no job would start; ask its "
                         f"administrator, or choose another with slurm_partition")
    total = int(info.get("TotalNodes", "0") or 0)
    if total < nodes:
        raise SlurmError(f"the launch needs {nodes} nodes, Slurm partition {partition} has {total}; "
                         f"launch on fewer nodes (--limit) or choose a bigger partition")
    limit = info.get("MaxTime", "UNLIMITED")
    if time_limit and limit.upper() not in ("UNLIMITED", "INFINITE"):
        wanted, allowed = minutes(time_limit), minutes(limit)
        if wanted is None or (allowed is not None and wanted > allowed):
            raise SlurmError(f"slurm_time_limit {time_limit} is above partition {partition}'s limit "
                             f"{limit}; give {limit} or less")
    return partition


def submit(argv: list[str], env: dict, cwd: str | None) -> str:
    """sbatch --parsable ...: the job id."""
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=COMMAND_TIMEOUT,
                          check=False)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise SlurmError(f"sbatch refused the job: {said[-1] if said else f'exit {done.returncode}'}")
    return done.stdout.strip().split(";")[0]


def job(job_id: str) -> dict | None:
    """The job as scontrol shows it; None when Slurm no longer knows it (MinJobAge passed)."""
    try:
        done = _scontrol("show", "job", "-o", job_id)
    except subprocess.TimeoutExpired:
        return {}
    if done.returncode != 0:
        return None if "Invalid job id" in done.stderr else {}
    return fields(done.stdout)


def hostnames(nodelist: str | None) -> list[str]:
    """Slurm's node list (node[0-2]) as names, in the job's order."""
    if not nodelist or nodelist in ("(null)", "None"):
        return []
    done = _scontrol("show", "hostnames", nodelist)
    return done.stdout.split() if done.returncode == 0 else []


def returncode(info: dict) -> int:
    """The job's exit as Popen gives a process's: its code, or -N when signal N ended it."""
    code, _sep, signum = info.get("ExitCode", "0:0").partition(":")
    code, signum = int(code or 0), int(signum or 0)
    return -signum if signum and not code else code


def verdict(info: dict, job_id: str = "?") -> dict | None:
    """How a job that Slurm ended (scontrol's `info`) ends the run, where its state says more than
    its ranks (VERDICTS): {state, rc, restart, msg}; None for COMPLETED, FAILED or a job not ended."""
    job_state = info.get("JobState")
    if job_state not in VERDICTS:
        return None
    state, rc, restart, words = VERDICTS[job_state]
    reason = info.get("Reason")
    nodes = info.get("NodeList")
    said = (f"Slurm ended job {job_id}: {job_state}{f' ({reason})' if reason and reason != 'None' else ''}: "
            f"{words}{f' (nodes {nodes})' if nodes and nodes != '(null)' else ''}")
    if restart:  # which of the job's nodes failed, as Slurm says now
        down = unusable_nodes()
        failed = [f"{name} is {down[name]}" for name in (hostnames(nodes) if down else []) if name in down]
        said += f"; {', '.join(failed)}" if failed else ""
    return {"state": state, "rc": rc, "restart": restart, "msg": said}


# The comment every job of a launch carries (--comment), so that `stop` finds torchfleet's jobs
# whatever their supervisor's state; the job's name is its run id.
JOB_COMMENT = "torchfleet"
CANCEL_TRIES = 3


def cancel(job_id: str, tries: int = CANCEL_TRIES, pause: float = 2.0) -> None:
    """scancel JOB_ID, again after a failure or a timeout (slurmctld busy or restarting), up to
    `tries` times; SlurmError says what the last try met. A job Slurm no longer knows is done."""
    said = ""
    for attempt in range(tries):
        if attempt:
            time.sleep(pause * attempt)
        try:
            done = subprocess.run(["scancel", job_id], capture_output=True, text=True,
                                  timeout=COMMAND_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            said = f"no answer within {COMMAND_TIMEOUT} s"
            continue
        except OSError as err:
            raise SlurmError(f"scancel cannot run on this node ({err}): cancel job {job_id} "
                             f"from a node with Slurm's commands") from err
        if done.returncode == 0 or "Invalid job id" in done.stderr:
            return
        lines = (done.stderr or done.stdout).strip().splitlines()
        said = lines[-1] if lines else f"exit {done.returncode}"
    raise SlurmError(f"scancel {job_id} failed {tries} times, the last: {said}; the job may still "
                     f"run: check it with squeue -j {job_id} and cancel it with scancel {job_id}")


def run_jobs(run_ids=None) -> list[dict]:
    """This user's jobs that torchfleet submitted ({job_id, run_id}): those named after `run_ids`
    if given, else every one carrying JOB_COMMENT. [] where Slurm is not installed."""
    try:
        done = subprocess.run(["squeue", "-h", "--me", "-o", "%i|%j|%k"], capture_output=True,
                              text=True, timeout=COMMAND_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    jobs = []
    for line in done.stdout.splitlines():
        job_id, _sep, rest = line.strip().partition("|")
        name, _sep, comment = rest.partition("|")
        if (name in run_ids) if run_ids else comment == JOB_COMMENT:
            jobs.append({"job_id": job_id, "run_id": name})
    return jobs


def queue() -> list[dict]:
    """Every account's jobs in Slurm's queue ({job_id, name, user, state, submitted, torchfleet}):
    a team's view of who waits and who runs. [] where Slurm is not installed."""
    try:
        done = subprocess.run(["squeue", "-h", "-o", "%i|%u|%T|%V|%k|%j"], capture_output=True,
                              text=True, timeout=COMMAND_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    jobs = []
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        fields = line.strip().split("|", 5)
        if len(fields) == 6:
            job_id, user, state, submitted, comment, name = fields
            jobs.append({"job_id": job_id, "name": name, "user": user, "state": state, "submitted": submitted,
                         "torchfleet": comment == JOB_COMMENT})
    return jobs
