"""What the nodes tell the controller, checked to shape before the command uses it.

The training account writes the run records and runs the processes torchfleet reads, and the
modules that read them run as that account (docs/security.md): whatever they answer is untrusted.
A value from there is used only once it has the shape torchfleet itself gives it, and reaches
Ansible as data, never as a template (cli/playbooks.untemplated).
"""

from __future__ import annotations

import re

from torchfleet.collection import module_util

# An absolute path of letters, digits and a few marks: no Jinja ({ } #), no shell or control
# characters; run directories are made by torchfleet from the run id and a log_dir.
PATH = re.compile(r"/[\w.,+@=:~/ -]*")


class NodeValueError(ValueError):
    """A value a node sent is not of the shape torchfleet gives it: refused, named."""


def run_id(value) -> str:
    """A run id, by the launch's own rule (_on_node/launch_plan.RUN_ID)."""
    if not isinstance(value, str) or not module_util("_on_node.launch_plan").RUN_ID.fullmatch(value):
        raise NodeValueError(f"run id {value!r} is not a run id")
    return value


def path(value, what: str = "path") -> str:
    if not isinstance(value, str) or not PATH.fullmatch(value) or ".." in value.split("/"):
        raise NodeValueError(f"{what} {value!r} is not a plain absolute path")
    return value


def number(value, what: str = "value") -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NodeValueError(f"{what} {value!r} is not a number")
    return value


def run_record(record) -> dict:
    """A run's record as torchrun_run_info lists it, with the fields the controller acts on checked:
    run_id, started_at (a number, or none) and log_dir (a path, or none)."""
    if not isinstance(record, dict):
        raise NodeValueError(f"record {record!r} is not a mapping")
    started, log_dir = record.get("started_at"), record.get("log_dir")
    try:
        return dict(record, run_id=run_id(record.get("run_id")),
                    started_at=None if started is None else number(started, "started_at"),
                    log_dir=None if log_dir is None else path(log_dir, "log_dir"))
    except NodeValueError as error:
        raise NodeValueError(f"the record of run {record.get('run_id')!r}: {error}") from None
