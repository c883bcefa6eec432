"""Calls of Ansible: the collection's playbooks, every one (the doctor's too), and ad-hoc module
calls, through ansible-runner.

Every run gets a fresh private data directory; settings travel as environment variables, extra
vars on the command line, so nothing of the user's (or a secret) is written to env/ files. The
one file ansible-runner writes with the whole environment (artifacts/ID/command) is removed as
soon as the playbook has started; the rest (stdout, job events) is kept only when the run fails.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from torchfleet.collection import checkout, collections_path, state_home


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def fact_cache_dir() -> Path:
    """Where the command's playbooks cache setup's facts, whatever directory it runs from:
    ANSIBLE_CACHE_PLUGIN_CONNECTION when set; from a checkout, its .cache/facts (where its
    ansible.cfg has ansible-playbook cache them); else torchfleet's XDG state directory. Never the
    current directory: the facts also live on each node (/etc/ansible/facts.d), so a cache
    elsewhere costs one round trip, not a wrong launch."""
    configured = os.environ.get("ANSIBLE_CACHE_PLUGIN_CONNECTION")
    if configured:
        return Path(configured)
    if (root := checkout()) is not None:
        return root / ".cache" / "facts"
    return state_home() / "fact_cache"  # beside the local clusters' directories; no cluster name has a '_'


def ansible_env() -> dict[str, str]:
    """The settings of the checkout's ansible.cfg that matter, explicit, so any directory works."""
    paths = [str(collections_path())]
    if os.environ.get("ANSIBLE_COLLECTIONS_PATH"):
        paths.append(os.environ["ANSIBLE_COLLECTIONS_PATH"])
    # ansible-playbook and friends as installed beside this Python (a venv not on PATH).
    bindir = str(Path(sys.executable).parent)
    return {
        "PATH": os.pathsep.join([bindir, os.environ.get("PATH", os.defpath)]),
        "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(paths),
        "ANSIBLE_HOST_KEY_CHECKING": "True",  # ansible-runner turns it off unless told
        "ANSIBLE_GATHERING": "smart",
        "ANSIBLE_CACHE_PLUGIN": "torchfleet.cluster.json_facts",
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(fact_cache_dir().resolve()),
        "ANSIBLE_CACHE_PLUGIN_TIMEOUT": "86400",
        "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
        "ANSIBLE_FORKS": os.environ.get("ANSIBLE_FORKS", "32"),
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_PIPELINING": "True",
    }


@dataclass
class HostState:
    done: int = 0
    changed: int = 0
    failed: int = 0
    task: str = ""


@dataclass
class Progress:
    """Follows the event stream: a live line per host on a terminal, plain lines otherwise."""
    stream: TextIO = sys.stderr
    live: bool = False
    verbose: int = 0
    hosts: dict[str, HostState] = field(default_factory=dict)
    failures: dict[str, dict] = field(default_factory=dict)
    results: list[dict] = field(default_factory=list)  # ok results: {host, task, action, res}
    failed_results: list[dict] = field(default_factory=list)  # the same, of failed tasks
    stats: dict = field(default_factory=dict)
    tail: deque = field(default_factory=lambda: deque(maxlen=15))  # Ansible's last output lines
    width: int | None = None  # the terminal's columns; None: asked at each draw (it may be resized)
    _drawn: int = 0
    _artifacts: Path | None = None

    def __call__(self, event: dict) -> bool:
        if self._artifacts is not None:
            # ansible-runner wrote the whole environment here before starting the playbook.
            (self._artifacts / "command").unlink(missing_ok=True)
            self._artifacts = None
        kind = event.get("event", "")
        data = event.get("event_data", {})
        host = data.get("host")
        task = data.get("task", "")
        if kind == "playbook_on_task_start" and not self.live:
            print(f"torchfleet: {task}", file=self.stream, flush=True)
        if kind == "playbook_on_stats":
            self.stats = data
        if host and kind.startswith("runner_on_") and kind not in ("runner_on_start",):
            state = self.hosts.setdefault(host, HostState())
            state.task = task
            res = data.get("res", {}) if isinstance(data.get("res"), dict) else {}
            if kind in ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable"):
                state.done += 1
            if res.get("changed"):
                state.changed += 1
            if kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
                state.failed += 1
                message = res.get("msg") or res.get("stderr") or res.get("reason") or "failed"
                self.failures[host] = {"task": task, "msg": str(message).strip(),
                                       "unreachable": kind == "runner_on_unreachable"}
                if not self.live:
                    print(f"torchfleet: {host}: FAILED: {task}", file=self.stream, flush=True)
            if kind in ("runner_on_ok", "runner_on_failed"):
                for warning in res.get("warnings") or []:  # a module's word to the user (module.warn)
                    text = warning.get("msg", warning) if isinstance(warning, dict) else warning
                    self.say(f"torchfleet: {host}: warning: {text}")
                found = self.results if kind == "runner_on_ok" else self.failed_results
                found.append({"host": host, "task": task, "res": res,
                              "action": data.get("resolved_action") or data.get("task_action")})
            if self.live:
                self.draw()
        if event.get("stdout"):
            self.tail.extend(ANSI.sub("", event["stdout"]).splitlines())
        if self.verbose and event.get("stdout") and not self.live:
            print(event["stdout"], file=self.stream, flush=True)
        return True

    def say(self, line: str) -> None:
        """A line of its own: where the hosts' lines are drawn, over them (drawn again below it)."""
        from torchfleet.screen import drawing

        if self.live and self._drawn:
            drawing(self.stream).write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0
        print(line, file=self.stream, flush=True)

    def draw(self) -> None:
        """One line per host, redrawn in place. Each line is cut to the terminal's width: a line
        that wrapped would take two rows, and moving up one row per host would then garble it."""
        from torchfleet.screen import drawing, inert

        out = self.stream
        width = self.width or shutil.get_terminal_size((80, 24)).columns
        names = max((len(name) for name in self.hosts), default=0)
        if self._drawn:
            drawing(out).write(f"\x1b[{self._drawn}F")
        for name, state in self.hosts.items():
            mark = "FAILED" if state.failed else "ok"
            line = inert(f"{name:<{names}} {state.done:>3} tasks {state.changed:>3} changed "
                         f"{state.failed} failed {mark:<6} {state.task}")
            drawing(out).write("\x1b[2K")  # torchfleet's own escapes; the line is shown as text
            out.write(f"{line[:max(1, width - 1)]}\n")
        self._drawn = len(self.hosts)
        out.flush()


@dataclass
class Outcome:
    rc: int
    status: str
    progress: Progress
    artifacts: Path | None  # kept when the run failed


class CtrlC:
    """The launch's own SIGINT handler, installed once it has something to stop. Until `follow()`
    a Ctrl-C is only heard: while the playbook runs, ansible-runner polls `heard` (its
    cancel_callback) and ends the playbook; before, the playbook is not run at all. Raising
    KeyboardInterrupt there could cut an import short (yaml's, ansible-runner's), and the stop that
    follows would fail on the module left half made. Without a cancel_callback ansible-runner would
    install a handler of its own, and a Ctrl-C would never reach the command."""

    def __init__(self):
        self.heard = False
        self.raising = False
        signal.signal(signal.SIGINT, self.handler)

    def handler(self, _signum, _frame):
        self.heard = True
        if self.raising:
            raise KeyboardInterrupt

    def cancel(self) -> bool:
        return self.heard

    def follow(self) -> None:
        """From here on a Ctrl-C raises KeyboardInterrupt, at once if one was heard already."""
        self.raising = True
        if self.heard:
            raise KeyboardInterrupt


# Set in every process of one call (ansible-playbook, its workers, their ssh): how the command
# finds them again after ansible-runner has killed the playbook's process group on a Ctrl-C.
CALL_MARK = "TORCHFLEET_CALL"


def end_processes_of_call(mark: str) -> list[int]:
    """SIGKILL every process of this machine that carries CALL_MARK=mark; their pids.

    ansible-runner ends a cancelled playbook by killing its process group, but ansible-core's
    workers each run in a session of their own (WorkerProcess._detach calls setsid): a worker
    outlives it, its ssh still running a module on a node, or blocked for ever writing a large
    result to the dead playbook's queue. Linux only (/proc); elsewhere nothing is found."""
    wanted = f"{CALL_MARK}={mark}".encode()
    ended = []
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if pid == os.getpid():
            continue
        try:
            # An OpenSSH master ("ssh: PATH [mux]") may serve another command's calls too; it ends
            # by itself once idle (ControlPersist).
            if (wanted in (entry / "environ").read_bytes().split(b"\0")
                    and not (entry / "cmdline").read_bytes().startswith(b"ssh: ")):
                os.kill(pid, signal.SIGKILL)
                ended.append(pid)
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return ended


def call(*, playbook: str | None = None, module: str | None = None, module_args: str = "",
         host_pattern: str = "cluster", inventories: list[str], cmdline: list[str],
         progress: Progress, keep_on_success: bool = False, keep_on_failure: bool = True,
         ctrl_c: CtrlC | None = None, passwords: dict | None = None) -> Outcome:
    import ansible_runner  # imported late: `render` and `cluster` never need it

    private = Path(tempfile.mkdtemp(prefix="torchfleet-run-"))
    ident = "run"
    progress._artifacts = private / "artifacts" / ident
    kwargs = dict(
        private_data_dir=str(private), ident=ident, project_dir=os.getcwd(),
        cmdline=shlex.join([a for i in inventories for a in ("-i", str(Path(i).resolve()))] + cmdline),
        envvars={**ansible_env(), CALL_MARK: str(private)}, suppress_env_files=True,
        quiet=True, event_handler=progress, rotate_artifacts=1,
        # Not "jsonfile": ansible-runner would point the fact cache into its artifacts.
        fact_cache_type="torchfleet.cluster.json_facts",
    )
    if passwords:  # Ansible's prompts (-K, --ask-vault-pass), answered; never written to disk
        kwargs["passwords"] = passwords
    if playbook:
        kwargs["playbook"] = playbook
    else:
        kwargs.update(module=module, module_args=module_args, host_pattern=host_pattern)
    if ctrl_c:
        # ansible-runner asks between reads of the playbook's output, 5 s apart by default: a
        # Ctrl-C must end the playbook before the head starts what it was asked to. (Its
        # `settings` argument is dropped where env/settings is missing: the file it is.)
        (private / "env").mkdir(exist_ok=True)
        (private / "env" / "settings").write_text('{"pexpect_timeout": 0.2}\n')
        kwargs["cancel_callback"] = ctrl_c.cancel
        if ctrl_c.heard:  # before the playbook started: it never does
            shutil.rmtree(private, ignore_errors=True)
            return Outcome(130, "canceled", progress, None)
    try:
        result = ansible_runner.run(**kwargs)
    finally:
        if ctrl_c and ctrl_c.heard:
            end_processes_of_call(str(private))
        (private / "artifacts" / ident / "command").unlink(missing_ok=True)
    rc = result.rc if isinstance(result.rc, int) else 1
    if not (keep_on_success if rc == 0 else keep_on_failure):
        shutil.rmtree(private, ignore_errors=True)
        return Outcome(rc, result.status, progress, None)
    return Outcome(rc, result.status, progress, private / "artifacts" / ident)


def print_failures(outcome: Outcome, stream=None) -> None:
    stream = stream or sys.stderr  # the one of the moment, not the one at import
    for host, failure in outcome.progress.failures.items():
        what = "unreachable" if failure["unreachable"] else "failed"
        message = failure["msg"]
        print(f"torchfleet: {host} {what} at {failure['task']!r}: {message}", file=stream)
    if outcome.rc != 0 and not outcome.progress.failures:
        # No host failed: Ansible itself stopped (a parse error, a bad option); show its words.
        for line in outcome.progress.tail:
            print(f"  {line}", file=stream)
    if outcome.artifacts:
        print(f"torchfleet: the playbook ended with rc {outcome.rc} ({outcome.status}); its output "
              f"and events are in {outcome.artifacts}", file=stream)
