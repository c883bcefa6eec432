"""`torchfleet doctor`: check a cluster that setup prepared, and say what is wrong and how to fix it.

Runs the collection's doctor playbook (read-only) against an inventory through ansible-runner, as
every playbook runs (torchfleet.ansible_calls), reads the JSON report the playbook writes on the controller,
and prints a table (or the JSON). Exit status: 0 when every check passes, 1 when a check fails, 2
when the doctor itself could not run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
from collections import deque
from pathlib import Path

from torchfleet.extra_vars import RenderError, parse_extra_vars

PLAYBOOK = "torchfleet.cluster.doctor"

OK, FAILED, DOCTOR_ERROR = 0, 1, 2


class DoctorError(Exception):
    """The doctor could not run: the inventory, the playbook, or Ansible itself."""

    def __init__(self, message: str, output: str = ""):
        super().__init__(message)
        self.output = output


def collect(inventory: str | os.PathLike, master_port: int | None = None, extra_vars: dict | None = None) -> dict:
    """Run the doctor playbook against `inventory`; return its report ({ok, head, master_port, results}).

    Raises DoctorError when the inventory cannot be read or the playbook does not finish.
    """
    from torchfleet.ansible_calls import Progress, ansible_env, call

    inventory = Path(inventory).expanduser()
    if not inventory.is_absolute():
        inventory = Path.cwd() / inventory
    if not inventory.exists():
        raise DoctorError(f"inventory {inventory} does not exist")
    if not os.access(inventory, os.R_OK):
        raise DoctorError(f"inventory {inventory} cannot be read")
    if shutil.which("ansible-playbook", path=ansible_env()["PATH"]) is None:
        raise DoctorError("ansible-playbook was not found (install ansible-core in this environment)")
    with tempfile.TemporaryDirectory(prefix="torchfleet-doctor-") as tmp:
        report = Path(tmp) / "report.json"
        variables = dict(extra_vars or {}, doctor_report=str(report))
        if master_port is not None:
            variables["master_port"] = int(master_port)
        # Quiet: the report is the doctor's output; Ansible's own is kept for when it fails.
        progress = Progress(stream=io.StringIO(), tail=deque(maxlen=200))
        outcome = call(playbook=PLAYBOOK, inventories=[str(inventory)], cmdline=["-e", json.dumps(variables)],
                       progress=progress, keep_on_failure=False)
        output = "\n".join(progress.tail)
        if outcome.rc != 0 or not report.exists():
            raise DoctorError(f"the doctor playbook failed (exit code {outcome.rc}): "
                              f"{_last_error(output)}", output)
        try:
            return json.loads(report.read_text())
        except (ValueError, RecursionError) as err:  # the nodes' answers: nested too deep, refused
            raise DoctorError(f"the doctor's report could not be read: {err}", output) from err


def _last_error(output: str) -> str:
    """The most telling line of a failed ansible-playbook run."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for marker in ('"msg":', "[ERROR]", "ERROR!", "fatal:", "[WARNING]: Unable to parse", "[WARNING]"):
        found = [line for line in lines if marker in line]
        if found:
            return found[-1][:500]
    return lines[-1][:500] if lines else "no output"


def exit_code(results) -> int:
    """0 when every check passed (information included), 1 when one failed."""
    return OK if all(entry.get("ok") for entry in results) else FAILED


def _wrap(text: str, width: int) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return lines + [line] if line else lines or [""]


def format_table(results, width: int = 100) -> str:
    """One row per check and node: CHECK, HOST, STATUS, then the reason (and the fix of a failure)."""
    rows = [(entry["check"], entry["host"], entry.get("level", "pass" if entry["ok"] else "fail").upper(),
             entry.get("reason", ""), entry.get("fix", "") if not entry.get("ok") else "")
            for entry in results]
    head = ("CHECK", "HOST", "STATUS", "REASON")
    w_check = max([len(head[0])] + [len(row[0]) for row in rows])
    w_host = max([len(head[1])] + [len(row[1]) for row in rows])
    w_status = max([len(head[2])] + [len(row[2]) for row in rows])
    indent = w_check + w_host + w_status + 6
    reason_width = max(30, width - indent)
    out = [f"{head[0]:<{w_check}}  {head[1]:<{w_host}}  {head[2]:<{w_status}}  {head[3]}"]
    for check, host, status, reason, fix in rows:
        lines = _wrap(reason, reason_width)
        if fix:
            lines += _wrap(f"fix: {fix}", reason_width)
        out.append(f"{check:<{w_check}}  {host:<{w_host}}  {status:<{w_status}}  {lines[0]}")
        out.extend(" " * indent + line for line in lines[1:])
    failed = sum(1 for entry in results if not entry.get("ok"))
    out.append("")
    out.append(f"{failed} check(s) failed." if failed else "All checks passed.")
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torchfleet doctor",
                                     description="Check a cluster that setup prepared; change nothing.")
    parser.add_argument("-i", "--inventory", default="inventory", help="the cluster's inventory (default: inventory)")
    parser.add_argument("-p", "--master-port", type=int, default=None,
                        help="the rendezvous port that must be free on the head (default: the launch's)")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                        help="KEY=VALUE, JSON or @FILE, as ansible-playbook (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        extra = parse_extra_vars(args.extra_vars)
    except RenderError as err:
        print(f"torchfleet doctor: {err}", file=sys.stderr)
        return DOCTOR_ERROR
    try:
        report = collect(args.inventory, master_port=args.master_port, extra_vars=extra)
    except DoctorError as err:
        if args.json:
            print(json.dumps({"ok": False, "error": str(err), "results": []}, indent=2))
        print(f"torchfleet doctor could not run: {err}", file=sys.stderr)
        if err.output:
            print(err.output[-3000:], file=sys.stderr)
        return DOCTOR_ERROR
    results = report.get("results", [])
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_table(results, width=shutil.get_terminal_size((120, 24)).columns))
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
