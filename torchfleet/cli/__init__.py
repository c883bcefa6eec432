# PYTHON_ARGCOMPLETE_OK
"""The `torchfleet` command: main() parses (parser.py) and runs one subcommand, each in a file of
its own; playbooks.py calls Ansible with the user's options."""

from __future__ import annotations

import argparse
import sys

from torchfleet.cli.launch import launch_command
from torchfleet.cli.parser import build_parser
from torchfleet.cli.render import render_command
from torchfleet.cli.usage import INTERRUPTED, UsageError


def main(argv: list[str] | None = None) -> int:
    from torchfleet.screen import guard_terminals

    # Whatever reaches the user's terminal is shown as text: much of it is the nodes' to write.
    before = guard_terminals()
    try:
        return command(argv)
    except KeyboardInterrupt:
        # A Ctrl-C that no command's own handling caught (it landed between them, or as one
        # ended): the shell's code for it, never Python's death by SIGINT.
        return INTERRUPTED
    finally:
        sys.stdout, sys.stderr = before


def command(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["doctor"]:
        from torchfleet.cli import doctor
        return doctor.main(argv[1:])
    # Everything after the first `--` goes to the training script, byte for byte.
    script_args = None
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    try:  # shell completion, where the optional extra is installed (torchfleet[completion])
        import argcomplete  # pylint: disable=import-outside-toplevel
    except ImportError:
        pass
    else:
        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    if script_args is not None:
        if args.func not in (launch_command, render_command):
            parser.error(f"`{args.command}` takes no script arguments after --")
        args.script_args = script_args
    if getattr(args, "format", None) == "json":
        args.json = True
    try:
        ask_passwords(args)
        return args.func(args)
    except UsageError as error:
        parser.exit(2, f"torchfleet {args.command}: error: {error}\n")
    except KeyboardInterrupt:
        return INTERRUPTED
    except Exception as error:  # noqa: BLE001 - a user-facing message, not a traceback
        from torchfleet.extra_vars import RenderError
        from torchfleet.inventory import InventoryError
        from torchfleet.node_values import NodeValueError

        if isinstance(error, InventoryError):  # the -i given: a usage error, as argparse's
            parser.exit(2, f"torchfleet {args.command}: error: {error}\n")
        hostfile_error = hostfile_error_class()
        if isinstance(error, NodeValueError):  # a node's answer, refused: what it said, not a traceback
            print(f"torchfleet {args.command}: error: refused what a node answered: {error}", file=sys.stderr)
            return 1
        if isinstance(error, RenderError) or (hostfile_error and isinstance(error, hostfile_error)):
            print(f"torchfleet {args.command}: error: {error}", file=sys.stderr)
            return 1
        raise


def ask_passwords(args: argparse.Namespace) -> None:
    """-K and --ask-vault-pass: asked once, before anything runs, as ansible-playbook asks; the
    Vault's also decrypts the -e files this command reads itself."""
    import getpass

    from torchfleet.extra_vars import use_vault

    if getattr(args, "ask_become_pass", False):
        args.become_password = getpass.getpass("BECOME password: ")
    if getattr(args, "ask_vault_pass", False):
        args.vault_password = getpass.getpass("Vault password: ")
    if getattr(args, "vault_password_file", None) or getattr(args, "vault_password", None) is not None:
        use_vault(args.vault_password_file, getattr(args, "vault_password", None))


def hostfile_error_class():
    from torchfleet.collection import plugin_util

    return plugin_util("_hostfile").HostfileError
