"""Writes what the launch option table (plugins/module_utils/_launch_options.py) declares:
roles/launch/meta/argument_specs.yml's options, roles/launch/defaults/main.yml, the short names
launch.yml maps, and the role variables validate.yml hands the request check (the blocks between
their BEGIN/END lines: written out, as a lookup or a query of every variable costs each launch
time).

    python tools/write_launch_options.py          # write them
    python tools/write_launch_options.py --check  # `make lint`: fail naming the files out of date

Add or change a launch option in the table, then run this; never edit those parts by hand.
"""
import json
import sys
import textwrap
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_options import (  # noqa: E402
    BY_NAME, CHECKED_OPTIONS, OPTIONS, role_options, short_names)

ROLE = ROOT / "roles" / "launch"
SPEC = ROLE / "meta" / "argument_specs.yml"
DEFAULTS = ROLE / "defaults" / "main.yml"
PLAYBOOK = ROOT / "playbooks" / "launch.yml"
VALIDATE = ROLE / "tasks" / "validate.yml"
RUN = ROLE / "tasks" / "run.yml"
# Module options that run.yml hands over inside another: each node's slots carry nproc_per_node.
FOLDED = {"nproc_per_node": "nodes"}
WRITER = "tools/write_launch_options.py from the option table in plugins/module_utils/_launch_options.py"
BEGIN = "      # BEGIN names written by tools/write_launch_options.py: do not edit\n"
END = "      # END names\n"
VARIABLES_BEGIN = "        # BEGIN variables written by tools/write_launch_options.py: do not edit\n"
VARIABLES_END = "        # END variables\n"


def _yaml(data, indent: int) -> str:
    text = yaml.safe_dump(data, sort_keys=False, width=100, default_flow_style=None)
    return "".join(" " * indent + line + "\n" for line in text.splitlines())


def spec_text() -> str:
    entry = yaml.safe_load(SPEC.read_text())["argument_specs"]["main"]
    options = {name: spec for name, (spec, _default) in role_options().items()}
    head = {key: value for key, value in entry.items() if key != "options"}
    return (f"---\n# Options written by {WRITER};\n# the descriptions above them are the role's own.\n"
            f"argument_specs:\n  main:\n" + _yaml(head, 4) + "    options:\n" + _yaml(options, 6))


def defaults_text() -> str:
    lines = [f"---\n# Written by {WRITER}.\n# launch.yml also takes most of these by their short "
             f"name on the command line (-e script=train.py):\n# playbooks/launch.yml maps them.\n"]
    for name, (spec, default) in role_options().items():
        if default is None:
            continue
        comment = "".join(f"# {line}\n" for line in textwrap.wrap(spec["description"], 98))
        lines.append(f"{comment}{name}: {json.dumps(default)}\n")
    return "".join(lines)


def _between(path: Path, begin: str, end: str, lines: str) -> str:
    text = path.read_text()
    start, stop = text.index(begin) + len(begin), text.index(end)
    return text[:start] + lines + text[stop:]


def playbook_text() -> str:
    names = "".join(f"      {short}: [{', '.join(roles)}]\n" for short, roles in short_names().items())
    return _between(PLAYBOOK, BEGIN, END, names)


def validate_text() -> str:
    # A variable with no default may be unset: the check reads it as none.
    checked = {BY_NAME[name].role_name for name in CHECKED_OPTIONS}
    variables = "".join(f"        {name}: \"{{{{ {name}{'' if default is not None else ' | default(none)'} }}}}\"\n"
                        for name, (_spec, default) in role_options().items() if name in checked)
    return _between(VALIDATE, VARIABLES_BEGIN, VARIABLES_END, variables)


def _tasks(tasks):
    for task in tasks:
        yield from _tasks(task["block"]) if "block" in task else (task,)


def unpassed_options() -> list[str]:
    """Module options with a role variable that run.yml's start of the module does not pass: a new
    option added to the table but not handed to the module (its value would be silently lost)."""
    calls = [task["torchfleet.cluster.torchrun_launch"] for task in _tasks(yaml.safe_load(RUN.read_text()))
             if "torchfleet.cluster.torchrun_launch" in task]
    passed = {key for call in calls if call.get("state") == "started" for key in call}
    return [option.name for option in OPTIONS
            if option.module and option.role_name and option.name not in passed | set(FOLDED)]


def main(argv: list[str]) -> int:
    wanted = {SPEC: spec_text(), DEFAULTS: defaults_text(), PLAYBOOK: playbook_text(), VALIDATE: validate_text()}
    stale = [path for path, text in wanted.items() if not path.exists() or path.read_text() != text]
    unpassed = unpassed_options()
    for name in unpassed:
        print(f"{RUN.relative_to(ROOT)} does not pass the module option {name} (launch_{name} is lost): "
              f"add `{name}: \"{{{{ {BY_NAME[name].role_name} }}}}\"` to its torchrun_launch task", file=sys.stderr)
    if "--check" in argv:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is not what the launch option table says: run "
                  f"python tools/write_launch_options.py and commit the result", file=sys.stderr)
        return 1 if stale or unpassed else 0
    for path in stale:
        path.write_text(wanted[path])
        print(f"wrote {path.relative_to(ROOT)}")
    return 1 if unpassed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
