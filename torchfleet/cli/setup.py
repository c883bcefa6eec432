"""`torchfleet setup`: the setup playbook on the inventory."""

from __future__ import annotations

import argparse

from torchfleet.cli.playbooks import finish, playbook


def setup_command(args: argparse.Namespace) -> int:
    outcome = playbook(args, "setup")
    stats = outcome.progress.stats
    if not args.json:
        for host, state in outcome.progress.hosts.items():
            print(f"{host:<24} {state.done} tasks, {state.changed} changed, {state.failed} failed")
    return finish(args, outcome, {"hosts": {h: vars(s) for h, s in outcome.progress.hosts.items()},
                                  "changed": stats.get("changed", {})})
