"""Writes what the launch option table (plugins/module_utils/_launch_options.py) declares:
roles/launch/meta/argument_specs.yml's options, roles/launch/defaults/main.yml, the short names
launch.yml maps, the role variables validate.yml hands the request check, the arguments run.yml
passes the torchrun_launch module, and the module's option documentation (the doc fragment
plugins/doc_fragments/torchrun_launch_options.py). The parts of playbooks and tasks it writes are
the blocks between their BEGIN/END lines: written out, as a lookup or a query of every variable
costs each launch time. And the typed launch request's fields (_on_node/launch_request.py).

    python tools/write_launch_options.py          # write them
    python tools/write_launch_options.py --check  # `make check`: fail naming the files out of date

Add or change a launch option in the table, then run this; never edit those parts by hand.
"""
import json
import sys
import textwrap
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_option_specs import (  # noqa: E402
    module_arguments, module_documentation, role_options, short_names)
from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_option_specs as specs  # noqa: E402
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_options import BY_NAME, CHECKED_OPTIONS  # noqa: E402

ROLE = ROOT / "roles" / "launch"
SPEC = ROLE / "meta" / "argument_specs.yml"
DEFAULTS = ROLE / "defaults" / "main.yml"
PLAYBOOK = ROOT / "playbooks" / "launch.yml"
VALIDATE = ROLE / "tasks" / "validate.yml"
RUN = ROLE / "tasks" / "run.yml"
STATE_TASKS = {"restarted": ROLE / "tasks" / "restart.yml", "stopped": ROLE / "tasks" / "stop.yml"}
FRAGMENT = ROOT / "plugins" / "doc_fragments" / "torchrun_launch_options.py"
REQUEST = ROOT / "plugins" / "module_utils" / "_on_node" / "launch_request.py"
VARIABLES = ROOT / "docs" / "variables.md"
TABLE_BEGIN = "<!-- BEGIN launch options written by tools/write_launch_options.py: do not edit -->\n"
TABLE_END = "<!-- END launch options -->\n"
WRITER = "tools/write_launch_options.py from the option table in plugins/module_utils/_launch_options.py"
BEGIN = "      # BEGIN names written by tools/write_launch_options.py: do not edit\n"
END = "      # END names\n"
VARIABLES_BEGIN = "        # BEGIN variables written by tools/write_launch_options.py: do not edit\n"
VARIABLES_END = "        # END variables\n"
ARGUMENTS_BEGIN = "    # BEGIN options written by tools/write_launch_options.py: do not edit\n"
ARGUMENTS_END = "    # END options\n"
WIDTH = 100  # the fragment's lines
FRAGMENT_HEAD = (
    "# -*- coding: utf-8 -*-\n"
    "# Copyright: torchfleet contributors\n"
    "# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)\n"
    "# Written by tools/write_launch_options.py from the option table in\n"
    "# plugins/module_utils/_launch_options.py: change the table and run that, never this file.\n"
    '"""The torchrun_launch module\'s options, documented, from the launch option table that also\n'
    'gives the module its argument spec; ansible-test\'s validate-modules checks the two agree."""\n\n'
    "from __future__ import annotations\n\n\n"
    "class ModuleDocFragment:  # pylint: disable=too-few-public-methods\n")
RUN_WIDTH = 120  # run.yml's: a longer value is folded onto a line of its own
FIELDS_BEGIN = "    # BEGIN fields written by tools/write_launch_options.py: do not edit\n"
FIELDS_END = "    # END fields\n"
# The request's field type of each table type (a list's by its elements).
ANNOTATIONS = {"str": "str", "path": "str", "int": "int", "bool": "bool", "dict": "dict[str, Any]"}


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
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise SystemExit(f"{_shown(path)} needs one line {begin.strip()!r}, then one {end.strip()!r}, "
                         f"around what {WRITER} writes")
    start, stop = text.index(begin) + len(begin), text.index(end)
    return text[:start] + lines + text[stop:]


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def playbook_text() -> str:
    names = "".join(f"      {short}: [{', '.join(roles)}]\n" for short, roles in short_names().items())
    return _between(PLAYBOOK, BEGIN, END, names)


def validate_text() -> str:
    # A variable with no default may be unset: the check reads it as none.
    checked = {BY_NAME[name].role_name for name in CHECKED_OPTIONS}
    variables = "".join(f"        {name}: \"{{{{ {name}{'' if default is not None else ' | default(none)'} }}}}\"\n"
                        for name, (_spec, default) in role_options().items() if name in checked)
    return _between(VALIDATE, VARIABLES_BEGIN, VARIABLES_END, variables)


def _first(candidates, wanted, what: str) -> str:
    """The first YAML text of `candidates` that reads back as `wanted` (with its indentation)."""
    for text in candidates:
        try:
            if yaml.safe_load(textwrap.dedent(text)) == wanted:
                return text
        except yaml.YAMLError:
            pass
    raise SystemExit(f"{what}: no YAML form found that reads back as the table says: {wanted!r}")


def _flow(value) -> str:
    """`value` as YAML on one line: [a, b], {}, 29500, started."""
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).rstrip("\n").removesuffix("\n...")


def _wrapped(lead: str, text: str, indent: int) -> list[str]:
    lines = textwrap.wrap(text, width=WIDTH, initial_indent=lead, subsequent_indent=" " * indent,
                          break_long_words=False, break_on_hyphens=False)
    return [line + "\n" for line in lines] or [lead.rstrip() + "\n"]


def _paragraph(lead: str, text: str, indent: int, wanted, what: str) -> str:
    """`text` after `lead` (`key: ` or `- `), folded at WIDTH: plain where YAML reads it back,
    else double-quoted."""
    return _first(("".join(_wrapped(lead, text, indent)), "".join(_wrapped(lead, json.dumps(text), indent))),
                  wanted, what)


def _documentation(name: str, entry: dict, indent: int) -> str:
    pad = " " * indent
    lines = [f"{pad}{name}:\n"]
    description = entry["description"]
    if isinstance(description, str):
        lead = f"{pad}  description: "
        lines.append(_paragraph(lead, description, indent + 4, {"description": description}, name))
    else:
        lines.append(f"{pad}  description:\n")
        lines += [_paragraph(f"{pad}    - ", text, indent + 6, [text], name) for text in description]
    for key, value in entry.items():
        if key == "suboptions":
            lines.append(f"{pad}  suboptions:\n")
            lines += [_documentation(sub, subentry, indent + 4) for sub, subentry in value.items()]
        elif key != "description":
            lines.append(f"{pad}  {key}: {_flow(value)}\n")
    return "".join(lines)


def fragment_text() -> str:
    options = module_documentation()
    documentation = "options:\n" + "".join(_documentation(name, entry, 2) for name, entry in options.items())
    if yaml.safe_load(documentation) != {"options": options} or '"""' in documentation:
        raise SystemExit(f"{_shown(FRAGMENT)}: the documentation written does not read back as the table's")
    return FRAGMENT_HEAD + f'    DOCUMENTATION = r"""\n{documentation}"""\n'


def _argument(name: str, value: str) -> str:
    inline = f"    {name}: {json.dumps(value) if '{{' in value else _flow(value)}\n"
    lines = value.split("\n")
    folded = f"    {name}: >-\n" + "".join(f"      {line}\n" for line in lines)
    literal = f"    {name}: |-\n" + "".join(f"      {line}\n" for line in lines)
    short = "\n" not in value and len(inline) <= RUN_WIDTH + 1
    return _first((inline, folded, literal) if short else (folded, literal), {name: value}, f"run.yml's {name}")


def run_text() -> str:
    """run.yml with the module's arguments as the table gives them: the value of each module option
    (module_value), a comment above it where the table explains it (module_note)."""
    lines = []
    for name, (value, note) in module_arguments().items():
        lines += [f"    # {line}\n" for line in note.splitlines()]
        lines.append(_argument(name, value))
    return _between(RUN, ARGUMENTS_BEGIN, ARGUMENTS_END, "".join(lines))


def _field(option) -> str:
    kind = f"list[{ANNOTATIONS.get(option.elements, 'Any')}]" if option.type == "list" else ANNOTATIONS[option.type]
    if option.default is None:
        return f"    {option.name}: {kind} | None = None\n"
    if isinstance(option.default, (list, dict)):
        if option.default:
            raise SystemExit(f"{option.name}: a list or mapping default must be empty, for the request's field")
        return f"    {option.name}: {kind} = field(default_factory={type(option.default).__name__})\n"
    default = json.dumps(option.default) if isinstance(option.default, str) else repr(option.default)
    return f"    {option.name}: {kind} = {default}\n"


def request_text() -> str:
    """launch_request.py's LaunchRequest: a typed field per module option, at the table's default."""
    return _between(REQUEST, FIELDS_BEGIN, FIELDS_END, "".join(_field(option) for option in specs.OPTIONS if option.module))


def _text(description) -> str:
    return description if isinstance(description, str) else " ".join(description)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def variables_text() -> str:
    """docs/variables.md's table of every launch option a user sets: the short name typed with -e,
    the role's variable, the torchfleet flag, the default and what it means."""
    by_role = {option.role_name: option for option in specs.OPTIONS if option.role_name}
    rows = ["| `-e` name | role variable | flag | default | meaning |\n", "|---|---|---|---|---|\n"]
    for name, (spec, default) in role_options().items():
        option = by_role[name]
        flags = ", ".join(sorted({f"`{command} --{option.name.replace('_', '-')}`" for command, _help in option.cli}))
        shown = "(computed)" if isinstance(default, str) and "{{" in default else f"`{json.dumps(default)}`"
        choices = f" One of {', '.join(f'`{choice}`' for choice in spec['choices'])}." if spec.get("choices") else ""
        rows.append(f"| {f'`{option.short}`' if option.short else ''} | `{name}` | {flags} | {shown} | "
                    f"{_cell(_text(spec['description']))}{choices} |\n")
    return _between(VARIABLES, TABLE_BEGIN, TABLE_END, "".join(rows))


def state_text(state: str) -> str:
    """restart.yml or stop.yml with the module's arguments of that state: the state, and each
    option the table passes it too (also_for), as run.yml passes it; in every task of the file."""
    lines = [f"    state: {state}\n"]
    for option in specs.OPTIONS:
        if state in option.also_for:
            lines.append(_argument(option.name, option.module_arg))
    path, text = STATE_TASKS[state], ""
    rest = path.read_text()
    while ARGUMENTS_BEGIN in rest:  # every task of the file
        start = rest.index(ARGUMENTS_BEGIN) + len(ARGUMENTS_BEGIN)
        if ARGUMENTS_END not in rest[start:]:
            break
        text += rest[:start] + "".join(lines)
        rest = rest[rest.index(ARGUMENTS_END, start):]
    if not text:
        raise SystemExit(f"{_shown(path)} needs lines {ARGUMENTS_BEGIN.strip()!r} and {ARGUMENTS_END.strip()!r} "
                         f"around each module's arguments that {WRITER} writes")
    return text + rest


def main(argv: list[str]) -> int:
    wanted = {SPEC: spec_text(), DEFAULTS: defaults_text(), PLAYBOOK: playbook_text(), VALIDATE: validate_text(),
              RUN: run_text(), FRAGMENT: fragment_text(), REQUEST: request_text(),
              VARIABLES: variables_text(), **{path: state_text(state) for state, path in STATE_TASKS.items()}}
    stale = [path for path, text in wanted.items() if not path.exists() or path.read_text() != text]
    if "--check" in argv:
        for path in stale:
            print(f"{_shown(path)} is not what the launch option table says: run "
                  f"python tools/write_launch_options.py and commit the result", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(wanted[path])
        print(f"wrote {_shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
