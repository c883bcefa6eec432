# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the launch option table (_launch_options.py) says of each option: one ``Option``.

Standard library only: the CLI imports this file outside Ansible.
"""

from __future__ import annotations

from dataclasses import dataclass

ROLE_PREFIX = "launch_"
UNSET = object()


@dataclass(frozen=True)
class Option:
    """One launch option. `name` is the module's option and the request's key; the launch role
    takes it as launch_NAME (`role`), and a user on the command line as `short`.

    `doc` describes it: the role's variable (argument_specs.yml, defaults/main.yml), and the
    module's option too where `module_doc` is empty (the module's own inputs, which the role
    computes; a tuple is paragraphs). `module_doc` is the module's documentation where the role's
    variable is another thing: the module takes resolved values (env_secrets' values where the
    role takes their names, a number of workers where the role takes auto, the script's path on
    the nodes), and its O()/RV() markup names module options and results the role has not."""
    name: str
    type: str
    doc: str | tuple[str, ...]
    default: object = None
    choices: tuple = ()
    elements: str | None = None
    no_log: bool | None = None
    module: bool = True  # an option of the torchrun_launch module
    role: str | None = ""  # the role's variable ("": launch_NAME; None: not the role's)
    role_type: str | None = None  # raw where the role's own check names a bad value better
    role_default: object = UNSET  # where the role's differs; "{{ ... }}" is computed
    role_choices: tuple | None = None
    role_elements: str | None = None
    short: str | None = None  # the name typed with -e (launch.yml maps it to the role's)
    required: bool = False  # the module's (a node's suboptions)
    suboptions: tuple[Option, ...] = ()  # the module's, of each dict of a list (nodes)
    version_added: str | None = None  # the module's documentation: the release that added it
    module_doc: str | tuple[str, ...] = ()  # with ansible-doc's markup; a tuple is paragraphs
    # What run.yml passes the module: "" launch_NAME's value where the role has that variable (else
    # nothing), None nothing, or this value (Jinja); module_note is a comment written above it.
    module_value: str | None = ""
    module_note: str = ""
    # The other module states whose tasks pass it too, as run.yml does: "restarted" (restart.yml),
    # "stopped" (stop.yml).
    also_for: tuple[str, ...] = ()
    # The torchfleet command's flag of it, --NAME with dashes: ((command, its help), ...) for the
    # commands that take it (the CLI's parser adds it, and passes its value on by the short name).
    cli: tuple[tuple[str, str], ...] = ()
    # A list variable of the role: an example of its items, which the check of a value that is no
    # list shows as the fix (the role's lists are LIST_OPTIONS).
    example: tuple = ()

    @property
    def role_name(self) -> str | None:
        if self.role is None:
            return None
        return self.role or (self.name if self.name.startswith(ROLE_PREFIX) else ROLE_PREFIX + self.name)

    @property
    def module_arg(self) -> str | None:
        """What run.yml's start of the module passes as this option; None: nothing."""
        if not self.module or self.module_value is None:
            return None
        if self.module_value:
            return self.module_value
        return f"{{{{ {self.role_name} }}}}" if self.role_name else None
