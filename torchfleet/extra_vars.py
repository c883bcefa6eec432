"""-e as ansible-playbook reads it: the one parser of extra vars of every command."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml


class RenderError(Exception):
    """A problem the user can act on."""


def parse_extra_vars(values: list[str]) -> dict:
    """-e KEY=VALUE (several per -e), -e JSON/YAML mapping, -e @FILE; later ones win."""
    result: dict = {}
    for value in values:
        if value.startswith("@"):
            if not Path(value[1:]).expanduser().is_file():
                raise RenderError(f"-e {value}: no such file; give the path of a YAML or JSON file of "
                                  f"variables after the @")
            try:
                data = yaml.safe_load(Path(value[1:]).expanduser().read_text())
            except (OSError, yaml.YAMLError) as error:
                raise RenderError(f"-e {value}: cannot read it: {error}") from None
        elif value.lstrip().startswith(("{", "[")):
            try:
                data = yaml.safe_load(value)
            except yaml.YAMLError as error:
                raise RenderError(f"-e {value!r} is not valid JSON/YAML: {error}") from None
        else:
            data = {}
            for word in shlex.split(value):
                key, sep, val = word.partition("=")
                if not sep or not key:
                    raise RenderError(f"-e {value!r}: expected KEY=VALUE, JSON or @FILE")
                data[key] = val
        if data is None:
            continue
        if not isinstance(data, dict):
            raise RenderError(f"-e {value!r} must give a mapping of variables")
        result.update(data)
    return result
