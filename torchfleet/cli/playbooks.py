"""The command's calls of Ansible: its options as ansible-playbook takes them, the collection's
playbooks and ad-hoc modules run through ansible_calls, and their results."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from torchfleet.cli.usage import UsageError


def untemplated(value):
    """`value` as Ansible's JSON of data that is never a template: each string wrapped as
    {"__ansible_unsafe": ...}, which ansible-core reads, in -e and in an ad-hoc call's -a alike,
    as a string not to template. Every string, not only those with "{{": a "#jinja2:" header
    makes a template of a string without one."""
    if isinstance(value, str):
        return {"__ansible_unsafe": value}
    if isinstance(value, (list, tuple)):
        return [untemplated(item) for item in value]
    if isinstance(value, dict):  # keys are never templated
        return {str(key): untemplated(item) for key, item in value.items()}
    return value


def ansible_args(args: argparse.Namespace) -> list[str]:
    """The connection and Vault options, to ansible-playbook as the user gave them."""
    cmdline = []
    for option, value in (("--user", args.user), ("--private-key", args.private_key),
                          ("--forks", args.forks)):
        if value is not None:
            cmdline += [option, str(value)]
    for path in args.vault_password_file:
        cmdline += ["--vault-password-file", path]
    # Asked once here (ansible-runner answers Ansible's own prompts with them: `passwords`).
    cmdline += ["--ask-vault-pass"] * args.ask_vault_pass + ["--ask-become-pass"] * args.ask_become_pass
    return cmdline


def passwords(args: argparse.Namespace) -> dict:
    """ansible-runner's answers to Ansible's password prompts: {prompt pattern: password}."""
    answers = {}
    if getattr(args, "become_password", None) is not None:
        answers[r"BECOME password.*:\s*?$"] = args.become_password
    if getattr(args, "vault_password", None) is not None:
        answers[r"Vault password.*:\s*?$"] = args.vault_password
    return answers


def playbook_args(args: argparse.Namespace, **fixed) -> list[str]:
    cmdline = ansible_args(args)
    for value in args.extra_vars:
        # Ansible would fail on it while reading the inventory, in words about the inventory.
        if value.startswith("@") and not Path(value[1:]).expanduser().is_file():
            raise UsageError(f"-e {value}: no such file; give the path of a YAML or JSON file of "
                             f"variables after the @")
        cmdline += ["-e", value]
    if fixed:  # arguments arrive byte for byte, whatever they hold
        cmdline += ["-e", json.dumps(untemplated(fixed), ensure_ascii=False)]
    if args.limit:
        cmdline += ["--limit", args.limit]
    if args.verbose > 1:
        cmdline.append("-" + "v" * (args.verbose - 1))
    return cmdline


def progress(args: argparse.Namespace):
    from torchfleet.ansible_calls import Progress

    return Progress(stream=sys.stderr, live=sys.stderr.isatty() and not args.verbose,
                    verbose=args.verbose)


def results(outcome, action: str, failed: bool = False) -> list[dict]:
    """The results of one module's tasks, found by the module Ansible resolved, not task titles."""
    found = outcome.progress.results + (outcome.progress.failed_results if failed else [])
    return [item for item in found if item.get("action") == action]


def playbook(args: argparse.Namespace, name: str, ctrl_c=None, **fixed):
    from torchfleet.inventory import inventory_paths
    from torchfleet.ansible_calls import call

    with tempfile.TemporaryDirectory(prefix="torchfleet-inv-") as scratch:
        inventories = inventory_paths(args.inventory, Path(scratch))
        return call(playbook=f"torchfleet.cluster.{name}", inventories=inventories,
                    cmdline=playbook_args(args, **fixed), progress=progress(args), ctrl_c=ctrl_c,
                    passwords=passwords(args))


def finish(args: argparse.Namespace, outcome, payload: dict) -> int:
    from torchfleet.ansible_calls import print_failures

    if args.json:
        payload = dict(payload, rc=outcome.rc, status=outcome.status,
                       failures=outcome.progress.failures,
                       artifacts=str(outcome.artifacts) if outcome.artifacts else None)
        print(json.dumps(payload, indent=1))
    if outcome.rc != 0:
        print_failures(outcome)
    return outcome.rc


def adhoc(args: argparse.Namespace, module: str, module_args: dict, pattern: str, extra: list[str]):
    """Run one module on `pattern`'s hosts; its arguments are data, never templates: some are
    what the nodes said (a run's record names its log_dir), and Ansible templates -a on the
    controller."""
    from torchfleet.inventory import inventory_paths
    from torchfleet.ansible_calls import call

    with tempfile.TemporaryDirectory(prefix="torchfleet-inv-") as scratch:
        inventories = inventory_paths(args.inventory, Path(scratch))
        cmdline = ansible_args(args) + list(extra) + (["--limit", args.limit] if args.limit else [])
        return call(module=module, module_args=json.dumps(untemplated(module_args)), host_pattern=pattern,
                    inventories=inventories, cmdline=cmdline, progress=progress(args),
                    passwords=passwords(args))
