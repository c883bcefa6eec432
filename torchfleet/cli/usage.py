"""What the command promises its user: the errors of usage it names, the run ids it takes, and
its exit codes (said in each command's --help)."""

from __future__ import annotations

from torchfleet.collection import module_util

# The states of a run still going, as the head's record says them (its record.ACTIVE).
ACTIVE_STATES = ("starting", "running", "restarting")
# A launch that did not start (refused by a check, the inventory, an unreachable node) exits with
# this, as `docker run` does for its own errors: a run's own codes are 0 to 255 otherwise.
REFUSED = 125
INTERRUPTED = 130
RUN_EXITS = ("exit: the run's own code: 0, the first failing rank's (128+N for signal N), else the "
             "launcher's; 1 a run lost with its supervisor; 125 the launch was refused before anything "
             "started; 130 Ctrl-C; 255 the stream from the head was lost (the run goes on); 2 bad usage")
ANSIBLE_EXITS = "exit: 0 done, 2 bad usage, else ansible-playbook's code (the failures are printed)"


class UsageError(Exception):
    """Bad arguments found after parsing; exit 2 like argparse."""


def check_run_id(run_id: str) -> None:
    """The launch's own rule for run ids (_on_node/launch_plan.py's RUN_ID), checked before Ansible starts."""
    if not module_util("_on_node.launch_plan").RUN_ID.fullmatch(run_id):
        raise UsageError(f"run id {run_id!r} is not valid (letters, digits, '_', '.', '-')")
