# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What follows from the launch option table (_launch_options.py): the torchrun_launch module's
argument spec and its documentation, the arguments the launch role's run.yml passes it, the role's
argument spec and defaults, and launch.yml's short names (tools/write_launch_options.py writes
the files; ``make lint`` fails when they are out of date).

Standard library only.
"""

from __future__ import annotations

import json

from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_option_schema import UNSET, Option
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_options import OPTIONS


def _spec(option: Option) -> dict:
    entry: dict = {"type": option.type}
    for key in ("default", "elements", "no_log"):
        if getattr(option, key) is not None:
            entry[key] = getattr(option, key)
    if option.required:
        entry["required"] = True
    if option.choices:
        entry["choices"] = list(option.choices)
    if option.suboptions:
        entry["options"] = {sub.name: _spec(sub) for sub in option.suboptions}
    return entry


def argument_spec() -> dict:
    """The torchrun_launch module's argument spec."""
    return {option.name: _spec(option) for option in OPTIONS if option.module}


def _documented(option: Option) -> dict:
    doc = option.module_doc or option.doc
    entry: dict = {"description": list(doc) if isinstance(doc, tuple) else doc, "type": option.type}
    if option.required:
        entry["required"] = True
    if option.elements:
        entry["elements"] = option.elements
    if option.choices:
        entry["choices"] = list(option.choices)
    if option.default is not None:
        entry["default"] = option.default
    if option.version_added:
        entry["version_added"] = option.version_added
    if option.suboptions:
        entry["suboptions"] = {sub.name: _documented(sub) for sub in option.suboptions}
    return entry


def module_documentation() -> dict:
    """The torchrun_launch module's options as its documentation gives them (the doc fragment
    plugins/doc_fragments/torchrun_launch_options.py, which tools/write_launch_options.py writes)."""
    return {option.name: _documented(option) for option in OPTIONS if option.module}


def module_arguments() -> dict:
    """{module option: (its value, a comment on it)} as run.yml's start of the module passes them
    (tools/write_launch_options.py writes them there), in table order."""
    return {option.name: (option.module_arg, option.module_note) for option in OPTIONS
            if option.module_arg is not None}


def role_options() -> dict:
    """{role variable: (its argument spec entry, its default)} of the launch role, in table order;
    a default of UNSET means the role has none."""
    options = {}
    for option in OPTIONS:
        if option.role_name is None:
            continue
        kind = option.role_type or option.type
        kind = "str" if kind == "path" else kind
        default = option.default if option.role_default is UNSET else option.role_default
        entry: dict = {"type": kind}
        elements = option.role_elements or (option.elements if kind == "list" else None)
        if elements:
            entry["elements"] = elements
        choices = option.choices if option.role_choices is None else option.role_choices
        if choices:
            entry["choices"] = list(choices)
        if default is not None and "{{" not in json.dumps(default):
            entry["default"] = default
        entry["description"] = option.doc
        options[option.role_name] = (entry, default)
    return options


def short_names() -> dict:
    """{name typed with -e: [the role variables that take its value]}, as launch.yml maps them."""
    return {option.short: [option.role_name] for option in OPTIONS if option.short}
