"""`make lint`: every role's argument spec and its defaults/main.yml say the same.

For each entry point's options: an option the role defaults to a plain value declares that value
as its spec default; an option whose default is computed ("{{ ... }}") declares none (its
description says where the value comes from), since a spec default cannot be a template. Every
variable in defaults/main.yml has an option, and a spec default belongs to a variable there.
"""
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def problems(role: Path) -> list[str]:
    defaults_file = role / 'defaults' / 'main.yml'
    defaults = yaml.safe_load(defaults_file.read_text()) if defaults_file.exists() else {}
    defaults = defaults or {}
    specs = yaml.safe_load((role / 'meta' / 'argument_specs.yml').read_text())['argument_specs']
    found, declared = [], set()
    for entry, spec in specs.items():
        for name, option in (spec.get('options') or {}).items():
            declared.add(name)
            where = f"{role.name}: {entry}'s option {name}"
            if name not in defaults:
                if 'default' in option:
                    found.append(f"{where} has spec default {option['default']!r} but no default in defaults/main.yml")
                continue
            value = defaults[name]
            if '{{' in json.dumps(value):
                if 'default' in option:
                    found.append(f"{where}: defaults/main.yml computes it ({value}); the spec must not "
                                 f"declare a default ({option['default']!r})")
            elif option.get('default') != value:
                found.append(f"{where}: spec default {option.get('default')!r} differs from defaults/main.yml's {value!r}")
    found += [f"{role.name}: {name} in defaults/main.yml has no option in meta/argument_specs.yml"
              for name in defaults if name not in declared]
    return found


def main() -> int:
    found = [line for role in sorted((ROOT / 'roles').iterdir()) for line in problems(role)]
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} difference(s) between argument specs and role defaults: make each spec "
              f"default equal the role's default (none for a computed one)", file=sys.stderr)
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
