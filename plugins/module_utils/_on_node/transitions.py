"""The one writer of a run's record: every change is a named transition, made by the run's owner.

The owner is the supervisor that began the run (or its restart by hand): its pid, its start time
and the boot, as the record names them. Each write takes the record's lock (state.lock, the
kernel's flock), reads the record as it is on disk, checks that the transition is allowed from
its state and that the writer owns it, then replaces it whole. So an old supervisor, or its
guardian, never writes over a run that a restart has taken since; two supervisors never both
begin the same run; and no write goes through after the run's last record.

| transition | from                                   | to                              | by             |
|------------|----------------------------------------|---------------------------------|----------------|
| begin      | no record, or an ended or lost run     | starting (restarting: by hand)  | a supervisor   |
| launched   | starting, restarting                   | running                         | its owner      |
| restarting | running, starting                      | restarting                      | its owner      |
| update     | starting, running, restarting          | (the same)                      | its owner      |
| end        | starting, running, restarting          | succeeded, failed, stopped, timed_out, hung | its owner |
| abandon    | starting, running, restarting          | lost                            | the owner's guardian |
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import sys
from contextlib import contextmanager

from .record import (ACTIVE, ENDED, STATE_FILE, RunRecord, RunState, boot_id, process_start, release_space,
                     supervisor_alive, write_state)

LOCK_FILE = "state.lock"
# A fault for the tests, set in the supervisor's environment: the first write after the launcher
# started fails as a full disk or a broken file system would.
FAULT_VAR = "TORCHFLEET_FAULT"
FAULT_SAVE = "save-after-launch"

S = RunState
TRANSITIONS = {
    "begin": ((None, *ENDED, S.LOST.value), (S.STARTING.value, S.RESTARTING.value)),
    "launched": ((S.STARTING.value, S.RESTARTING.value), (S.RUNNING.value,)),
    "restarting": ((S.RUNNING.value, S.STARTING.value), (S.RESTARTING.value,)),
    "update": (ACTIVE, ACTIVE),
    "end": (ACTIVE, ENDED),
    "abandon": (ACTIVE, (S.LOST.value,)),
}


class RecordRefused(Exception):
    """A transition that is not allowed, or not by this writer: nothing was written."""


class Owner:
    """Who holds a run: a supervisor process (pid, its start, the boot), in its attempt."""

    def __init__(self, pid: int, start: int | None, boot: str):
        self.pid, self.start, self.boot = pid, start, boot

    @classmethod
    def this_process(cls) -> Owner:
        return cls(os.getpid(), process_start(os.getpid()), boot_id())

    def holds(self, record: dict | None) -> bool:
        if not record:
            return False
        return (record.get("supervisor_pid"), record.get("supervisor_start"),
                record.get("boot_id")) == (self.pid, self.start, self.boot)

    def fields(self) -> dict:
        return {"supervisor_pid": self.pid, "supervisor_start": self.start, "boot_id": self.boot}


@contextmanager
def record_lock(run_dir: str):
    """The record's lock, for one read-check-write (or a guardian's whole clean-up)."""
    fd = os.open(os.path.join(run_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o640)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_raw(run_dir: str) -> dict | None:
    """The record as written (not as read_state shows a run whose supervisor is gone)."""
    try:
        with open(os.path.join(run_dir, STATE_FILE), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def check(name: str, on_disk: dict | None, owner: Owner, to: str, guardian: bool = False) -> None:
    """Raise RecordRefused unless `owner` may make transition `name` to `to` on the record as it
    is on disk."""
    sources, targets = TRANSITIONS[name]
    if name == "begin":
        # A run whose supervisor is gone reads as lost: a restart by hand may begin it again.
        current = None if on_disk is None else read_state_of(on_disk)
    else:
        current = on_disk.get("state") if on_disk else None
        if not owner.holds(on_disk):
            holder = on_disk.get("supervisor_pid") if on_disk else None
            raise RecordRefused(f"{name}: the run's record is held by supervisor {holder}, not by "
                                f"{'the guardian of ' if guardian else ''}{owner.pid}")
    if current not in sources:
        raise RecordRefused(f"{name}: not from a run that is {current}")
    if to not in targets:
        raise RecordRefused(f"{name}: not to {to}")


def read_state_of(on_disk: dict) -> str | None:
    """The state a reader sees: an active run without its supervisor is lost."""
    if on_disk.get("state") in ACTIVE and not supervisor_alive(on_disk):
        return S.LOST.value
    return on_disk.get("state")


def to_log(text: str) -> None:
    """Text for supervisor.log (the supervisor's stderr), which may lie on the disk that just
    filled: what cannot be written there is dropped, never raised into the run."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except OSError:
        pass


class RecordKeeper:
    """A supervisor's hold on its run's record: the record as last written, and its transitions.
    A write that fails for a full disk along the run is skipped (the next says more), unless it
    is `required`; the last one takes the space kept for it (reserve_space)."""

    def __init__(self, run_dir: str, record: RunRecord, owner: Owner):
        self.run_dir, self.owner = run_dir, owner
        self.record = record.updated(**owner.fields())
        self.launcher_started = False
        self.fault = os.environ.get(FAULT_VAR) == FAULT_SAVE

    def begin(self, state: str = S.STARTING.value, **changes) -> RunRecord:
        return self._write("begin", state, required=True, **changes)

    def launched(self, **changes) -> RunRecord:
        record = self._write("launched", S.RUNNING.value, required=True, **changes)
        self.launcher_started = True
        return record

    def restarting(self, **changes) -> RunRecord:
        return self._write("restarting", S.RESTARTING.value, **changes)

    def update(self, required: bool = False, **changes) -> RunRecord:
        return self._write("update", self.record.state, required=required, **changes)

    def end(self, state: str, **changes) -> RunRecord:
        return self._write("end", state, final=True, **changes)

    def _write(self, name: str, state: str, final: bool = False, required: bool = False, **changes) -> RunRecord:
        record = self.record.updated(state=state, **changes)
        if self.fault and self.launcher_started:
            self.fault = False
            raise OSError(errno.EIO, f"{FAULT_VAR}={FAULT_SAVE}: the record's write failed on purpose")
        with record_lock(self.run_dir):
            check(name, read_raw(self.run_dir), self.owner, state)
            try:
                write_state(self.run_dir, record.to_dict())
            except OSError as err:
                if not final and required:
                    raise
                if not final:
                    to_log(f"cannot write the run's record now: {err}\n")
                    self.record = record
                    return record
                release_space(self.run_dir)
                write_state(self.run_dir, record.to_dict())
        if final:
            release_space(self.run_dir)
        self.record = record
        return record


def abandon(run_dir: str, owner: Owner, clean_up) -> bool:
    """The guardian's transition: if `owner` (its supervisor, now gone) still holds an active
    run, or left a record nobody can read, `clean_up()` (under the record's lock, so no restart
    begins meanwhile) returns the record's changes, and the run is recorded lost. False where the
    run had ended, or is another supervisor's now: nothing is done."""
    with record_lock(run_dir):
        on_disk = read_raw(run_dir)
        if on_disk is not None and not (owner.holds(on_disk) and on_disk.get("state") in ACTIVE):
            return False
        changes = clean_up()
        base = RunRecord.from_dict(on_disk) if on_disk else RunRecord(**owner.fields())
        release_space(run_dir)
        try:
            write_state(run_dir, base.updated(state=S.LOST.value, **changes).to_dict())
        except OSError as err:
            to_log(f"cannot write the run's record: {err}\n")
    return True
