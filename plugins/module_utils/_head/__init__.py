"""The program on the head: what runs there outside Ansible, standard library only.

- supervisor: owns a run from its start to its end (`python3 -S -m _head.supervisor RUN_DIR`);
- record: the run's record (state.json) and the supervisor's plan (run.json), and the follower
  of a run's output (`python3 -S -m _head.record follow RUN_DIR`);
- report: what a run's logs say (the failing rank, the messages);
- probe: what a launch asks of each node (`python3 -S -m _head.probe`, a JSON request on stdin);
- fanout: the head's ssh to the other nodes (probes, the clean-up, the ssh masters);
- slurm: Slurm as the launch checks and drives it.

The launch module copies the package whole into each run's directory (`supervisor/_head/`), so a
run keeps the code it started with. The files are imported within the package by relative
imports alone, so the package works under any name: ansible_collections...module_utils._head
(module, filters, CLI) and `_head` on the head. record.py and probe.py import nothing of the
package: they also travel alone, as the text of one `python3 -S -c` argument (the follower from
the controller, the probe to the other nodes).
"""

from __future__ import annotations

import os

# The package's files, as the launch module copies them to the head.
FILES = ("__init__", "fanout", "probe", "record", "report", "slurm", "supervisor")


def source(name: str) -> str:
    """The text of one of FILES: a plain file beside this one, or a member of the launch
    module's zip under AnsiballZ (where inspect.getsource fails now and then)."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    try:
        with open(here, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        import pkgutil  # here only: 12 ms of imports at every start of the supervisor otherwise

        return pkgutil.get_data(__name__, name + ".py").decode()
