"""Following a run on the head from the controller: its output as it is written, and its end.

A run's supervisor keeps the run's record and launcher.log in the run's directory on the head;
here the controller runs the head package's follower there over ssh (`python3 -S -c`, the
standard library alone) and reads what it prints: "L <line>" for each line of output, then
"E <record>" when the run has ended. The ssh command is the one Ansible's own ssh connection
builds for the head (its variables, ansible.cfg's [ssh_connection] and the ANSIBLE_SSH_*
settings: a bastion configured for Ansible is a bastion for the stream), and host keys are checked
as torchfleet's playbooks check them: nothing here turns checking off.
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


# The most one line of the head's follower may hold: a piece of a rank's line is at most the
# head's tail.LINE_CAP (4 MiB), with its label; a run's record is far less. The follower runs as
# the training account, so what it sends is read within bounds (size here, depth in read_record).
MESSAGE_BYTES = 8 << 20


@dataclass
class Head:
    name: str
    user: str          # the training account, which owns the runs
    log_dir: str       # where the runs' directories are, `~user/...` for the training account's home
    ssh: list[str]     # ssh argv up to (and with) the destination
    become_password: str | None = None  # sudo's, where the login account needs one (-K)
    login: str | None = None  # the account ssh logs in as, where Ansible's settings name one


# Passwords of the ssh login itself: Ansible hands them to sshpass or an askpass helper of its
# own, which a stream cannot share; refused by name rather than left to hang on a prompt.
LOGIN_PASSWORDS = ("ansible_password", "ansible_ssh_pass", "ansible_ssh_password")
BECOME_PASSWORDS = ("ansible_become_password", "ansible_become_pass", "ansible_sudo_pass")


def _ssh_connection():
    from ansible.playbook.play_context import PlayContext
    from ansible.plugins.loader import connection_loader

    # By its short name: the loader finds the builtin plugin without Ansible's collection finder,
    # which this process must not install (module_util imports the collection from sys.path).
    return connection_loader.get("ssh", PlayContext(), None)


def ssh_login(name: str, hostvars: dict, user: str | None = None,
              private_key: str | None = None) -> tuple[list[str], str | None]:
    """(ssh argv, the account it logs in as) to a host as Ansible's ssh connection reaches it:
    the command its own builder makes from the host's variables (address, port, user, key,
    ansible_ssh_common_args and ansible_ssh_extra_args, ansible_ssh_executable) and Ansible's
    configuration (ansible.cfg's ssh_args, ANSIBLE_SSH_ARGS), but with a connection of its own
    (no ControlPersist master). `user` and `private_key`: -u and --private-key, which the host's
    own variables override, as in ansible-playbook. Host keys are checked whatever the
    configuration says, as torchfleet's playbooks run (ANSIBLE_HOST_KEY_CHECKING)."""
    given = [key for key in LOGIN_PASSWORDS if hostvars.get(key)]
    if given:
        raise FollowError(f"{name} is reached with a login password ({given[0]}), which torchfleet's "
                          f"stream of a run cannot give ssh: give the account an ssh key "
                          f"(ansible_ssh_private_key_file), or follow the run on the head itself")
    from ansible.errors import AnsibleError

    connection = _ssh_connection()
    variables = {"inventory_hostname": name, **({"ansible_user": user} if user else {}),
                 **({"ansible_ssh_private_key_file": private_key} if private_key else {}), **hostvars}
    try:
        connection.set_options(var_options=variables, direct={"host_key_checking": True})
        executable = connection.get_option("ssh_executable")
        if not shutil.which(executable):
            raise FollowError(f"no {executable} on this machine: install openssh-client to follow runs")
        # BatchMode: a prompt (a host key not known, a key's passphrase) fails the stream at once.
        argv = connection._build_command(executable, "ssh", "-o", "BatchMode=yes",
                                         connection.get_option("host") or name)
        login = connection.get_option("remote_user")
    except AnsibleError as error:
        raise FollowError(f"cannot build the ssh command that reaches {name} as Ansible would: {error}") from None
    # A connection of its own, never through a ControlPersist master (first given, so it wins over
    # Ansible's settings): a master would hold the stream's pipes, and the run's follower on the
    # head, after this end of it is gone, and for as long as it persists.
    argv = [argv[0], b"-o", b"ControlPath=none", *argv[1:]]
    return [os.fsdecode(arg) for arg in argv], (str(login) if login else None)


def become_password(hostvars: dict, given: str | None = None) -> str | None:
    """sudo's password for the head: -K's, else the inventory's (ansible_become_password)."""
    if given is not None:
        return given
    return next((str(hostvars[key]) for key in BECOME_PASSWORDS if hostvars.get(key)), None)


def remote_command(head: Head, hostvars: dict, args: list[str]) -> str:
    """`python3 -S -c <the follower> ARGS` on the head, as the training account unless the
    connection's account is it or root (the follower puts root's privileges down itself, before it reads
    anything of the run: privileges.py): through sudo, which
    reads its password from the stream's stdin when one was given (-K, ansible_become_password)."""
    program = module_util("_on_node.ssh_to_nodes").program(module_util("_on_node.follower").PROGRAM, "follower")
    argv = ["python3", "-S", "-c", program, *args]
    login = head.login or str(hostvars.get("ansible_user") or "")
    if login not in (head.user, "root"):
        sudo = ["sudo", "-S", "-p", ""] if head.become_password is not None else ["sudo", "-n"]
        argv = [*sudo, "-u", head.user, "--", *argv]
    return shlex.join(argv)


def follow(head: Head, hostvars: dict, run_id: str | None, ranks: str = "0", from_start: bool = True,
           on_line=None, until_end: bool = True, tail: int | None = None, on_piece=None) -> dict:
    """Stream the run's output until it has ended (or, not `until_end`, what it has written so
    far); returns its record. `on_line(text)` for each line as a file or a pipe shows it (each
    redraw of a line a line of its own); with `on_piece(kind, key, text)` the pieces of lines
    redrawn or cut go there instead (a terminal's screen.Live draws them in place), and a
    scheduler's word as kind "S". `ranks`: "0", "all", "rank:N", "node:HOST" or "none" (see the
    head package's labels.shown_parts); `tail`: of what was written before, the last lines only.
    The newest run when `run_id` is None."""
    where = f"{head.log_dir}/{run_id}" if run_id else head.log_dir
    verb = "follow" if until_end else "print"
    command = remote_command(head, hostvars, [verb, where, ranks, "start" if from_start else "now",
                                              *([str(tail)] if tail else [])])
    # ssh ignores a terminal's Ctrl-C (it keeps a signal ignored across exec): the Ctrl-C is for
    # this process, which decides what it means. Ansible-runner's handler for it is replaced.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    password = head.become_password
    # Bytes, each line decoded: text mode's universal newlines would take a "\r" for a line's end.
    proc = subprocess.Popen([*head.ssh, command], stdin=subprocess.DEVNULL if password is None else subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.stdout is not None  # a pipe, as asked
    out = proc.stdout
    if password is not None:  # sudo -S reads it first; the follower reads no stdin
        assert proc.stdin is not None  # a pipe, with a password
        try:
            proc.stdin.write(password.encode() + b"\n")
            proc.stdin.close()
        except BrokenPipeError:  # ssh already gone: its stderr says why, below
            pass
    record, read_to_end = None, False
    try:
        for raw in iter(lambda: out.readline(MESSAGE_BYTES + 1), b""):
            if len(raw) > MESSAGE_BYTES:
                raise FollowError(f"{head.name} sent a line of the run's output stream longer than "
                                  f"{MESSAGE_BYTES >> 20} MiB: refused, the stream ended")
            record = deliver(raw.decode("utf-8", "replace").rstrip("\n"), on_line, on_piece) or record
        read_to_end = True
    finally:
        if read_to_end:  # ssh's own exit status, not the kill's, for the message below
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            proc.kill()
        proc.stdin = None  # written and closed above, or never a pipe: nothing left to flush
        try:
            said = proc.communicate(timeout=5)[1].decode("utf-8", "replace").strip()
        except subprocess.TimeoutExpired:  # a process ssh started (a ProxyCommand) still holds it
            said = ""
    if record is None:
        last = said.splitlines()[-1] if said else ""
        hint = ""
        if "sudo:" in last and "password" in last:  # sudo -n, or -S with a wrong password
            hint = ("; the login account needs sudo's password on the head: give it with -K (--ask-become-pass) "
                    "or the inventory's ansible_become_password")
        raise FollowError(f"lost the run's output stream from {head.name} (ssh exited {proc.returncode}"
                          f"{': ' + last if last else ''}){hint}")
    return record


def deliver(raw: str, on_line=None, on_piece=None) -> dict | None:
    """Hand one line of the head's follower on (see follow); the run's record once it says it."""
    follower = module_util("_on_node.follower")  # the follower on the head: its lines' prefixes
    if raw.startswith(follower.LINE):
        if on_line:
            on_line(raw[2:])
    elif raw.startswith(follower.PIECES):
        kind, (key, _space, text) = raw[0], raw[2:].partition(" ")
        if on_piece:
            on_piece(kind, key, text)
        elif on_line and kind != "R" and (kind != "P" or text.strip()):
            on_line(text)  # a drawing (R) is left: a redraw or the line's end follows it
    elif raw.startswith(follower.STATUS):  # a Slurm job's state: pending (and why), running
        if on_piece:
            on_piece("S", "", f"torchfleet: {raw[2:].rstrip()}")
        else:
            print(f"torchfleet: {raw[2:].rstrip()}", file=sys.stderr, flush=True)
    elif raw.startswith(follower.END):
        return read_record(raw[2:])
    return None


def read_record(text: str) -> dict:
    """The run's record as the head's follower sends it (JSON), or FollowError: within
    MESSAGE_BYTES, and nested no deeper than Python's recursion allows (a RecursionError, caught)."""
    if len(text) > MESSAGE_BYTES:
        raise FollowError(f"the head sent a run's record longer than {MESSAGE_BYTES >> 20} MiB: refused")
    try:
        found = json.loads(text)
    except RecursionError:
        raise FollowError("the head sent a run's record nested too deep to read: refused") from None
    except ValueError as error:
        raise FollowError(f"the head sent a run's record that is not JSON ({error}): refused") from None
    if not isinstance(found, dict):
        raise FollowError("the head sent a run's record that is not a JSON object: refused")
    return found


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
    tried = record.get("attempts") or []
    for attempt, after in zip(tried, tried[1:]):  # why each attempt before the last ended, and who came in
        swap = ", ".join([f"{name} in" for name in after.get("joined") or []]
                         + [f"{name} out" for name in after.get("left") or []])
        err.append(f"torchfleet: attempt {attempt['attempt']} on {', '.join(attempt['nodes'])} ended "
                   f"{attempt.get('ended')}: {attempt.get('cause')}; restarted{' (' + swap + ')' if swap else ''}")
    for named in ((record.get("progress") or {}).get("stragglers") or {}).values():
        err.append(f"torchfleet: straggler: {named}")
    for name, why in (record.get("not_taken_back") or {}).items():
        err.append(f"torchfleet: {name} came back but was not taken back: {why}")
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
