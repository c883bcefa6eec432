"""Following a run on the head from the controller: its output as it is written, and its end.

A run's supervisor keeps the run's record and launcher.log in the run's directory on the head;
here the controller runs the head package's record.py there over ssh (`python3 -S -c`, the
standard library alone) and reads what it prints: "L <line>" for each line of output, then
"E <record>" when the run has ended. The ssh command is built from the inventory's own connection
settings for the head (address, port, user, key, ansible_ssh_common_args such as ProxyJump), and
host keys are checked as for Ansible: nothing here turns checking off.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass

from torchfleet.collection import module_util


class FollowError(Exception):
    """The head could not be reached, or answered something else than a run's output."""


@dataclass
class Head:
    name: str
    user: str          # the training account, which owns the runs
    log_dir: str       # where the runs' directories are, `~user/...` for the training account's home
    ssh: list[str]     # ssh argv up to (and with) the destination


def ssh_argv(name: str, hostvars: dict) -> list[str]:
    """ssh to a host as Ansible's ssh connection would reach it, from its inventory variables."""
    ssh = shutil.which("ssh")
    if not ssh:
        raise FollowError("no ssh on this machine: install openssh-client to follow runs")
    argv = [ssh, "-o", "BatchMode=yes"]
    if hostvars.get("ansible_port"):
        argv += ["-p", str(hostvars["ansible_port"])]
    if hostvars.get("ansible_ssh_private_key_file"):
        argv += ["-i", os.path.expanduser(str(hostvars["ansible_ssh_private_key_file"]))]
    if hostvars.get("ansible_user"):
        argv += ["-l", str(hostvars["ansible_user"])]
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        argv += shlex.split(str(hostvars.get(key) or ""))
    return argv + [str(hostvars.get("ansible_host") or name)]


def remote_command(head: Head, hostvars: dict, args: list[str]) -> str:
    """`python3 -S -c <record.py> ARGS` on the head, as the training account unless the
    connection's account is it or root (which reads the runs as they are)."""
    source = module_util("_head").source("record")
    argv = ["python3", "-S", "-c", source, *args]
    login = str(hostvars.get("ansible_user") or "")
    if login not in (head.user, "root"):
        argv = ["sudo", "-n", "-u", head.user, "--", *argv]
    return shlex.join(argv)


def follow(head: Head, hostvars: dict, run_id: str | None, ranks: str = "0", from_start: bool = True,
           on_line=None, until_end: bool = True, tail: int | None = None) -> dict:
    """Stream the run's output (`on_line(text)` for each shown line) until it has ended (or,
    not `until_end`, what it has written so far); returns its record. `ranks`: "0", "all",
    "rank:N", "node:HOST" or "none" (see the head package's record.shown); `tail`: of what was
    written before, the last lines only. The newest run when `run_id` is None."""
    follower = module_util("_head.record")  # the follower on the head: its lines' prefixes
    where = f"{head.log_dir}/{run_id}" if run_id else head.log_dir
    verb = "follow" if until_end else "print"
    command = remote_command(head, hostvars, [verb, where, ranks, "start" if from_start else "now",
                                              *([str(tail)] if tail else [])])
    # ssh ignores a terminal's Ctrl-C (it keeps a signal ignored across exec): the Ctrl-C is for
    # this process, which decides what it means. Ansible-runner's handler for it is replaced.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    proc = subprocess.Popen([*head.ssh, command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace",
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    record = None
    try:
        for raw in proc.stdout:
            if raw.startswith(follower.LINE):
                if on_line:
                    on_line(raw[2:].rstrip("\n"))
            elif raw.startswith(follower.STATUS):  # a Slurm job's state: pending (and why), running
                print(f"torchfleet: {raw[2:].rstrip()}", file=sys.stderr, flush=True)
            elif raw.startswith(follower.END):
                record = json.loads(raw[2:])
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        said = proc.stderr.read().strip()
    if record is None:
        raise FollowError(f"lost the run's output stream from {head.name} (ssh exited {proc.returncode}"
                          f"{': ' + said.splitlines()[-1] if said else ''})")
    return record


def end_report(record: dict, head: str) -> tuple[list[str], list[str]]:
    """(lines for stdout, lines for stderr) once a run has ended: the summary an attached launch,
    `logs -f` and `wait` end with, and for a failure its cause and the failing rank's own log."""
    # The playbook's report line (roles/launch/tasks/report.yml), with the state after the time.
    def known(key):  # a lost run recorded no code and no duration: say so, not None
        return "-" if record.get(key) is None else record[key]
    summary = (f"run {record.get('run_id', '?')}: rc {known('rc')}, world size "
               f"{record.get('world_size', '?')}, {known('duration')} s, {record.get('state')}, "
               f"logs in {record.get('log_dir', '?')} on {head}")
    err = []
    for attempt in (record.get("attempts") or [])[:-1]:  # why each attempt before the last ended
        err.append(f"torchfleet: attempt {attempt['attempt']} on {', '.join(attempt['nodes'])} ended "
                   f"{attempt.get('ended')}: {attempt.get('cause')}; restarted")
    if record.get("state") not in ("succeeded",):
        err.append(f"torchfleet: {record.get('msg', 'the run did not succeed')}")
        if record.get("failed_log_tail"):
            err.append(f"torchfleet: the last lines of {record.get('failed_log')} on "
                       f"{record.get('failed_host') or '?'}:")
            err += [f"  {line}" for line in record["failed_log_tail"]]
    return [summary], err


def exit_code(record: dict) -> int:
    """The run's own exit code: 0, the first failing rank's (128+N for a signal), else the
    launcher's; 1 for a run lost with its supervisor (no code was recorded)."""
    if record.get("state") == "succeeded":
        return 0
    for key in ("failed_exit_code", "rc"):
        if isinstance(record.get(key), int) and record[key] != 0:
            return record[key]
    return 1


def print_lines(lines, stream=None) -> None:
    for line in lines:
        print(line, file=stream or sys.stdout)
