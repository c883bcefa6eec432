"""-e as ansible-playbook reads it: the one parser of extra vars of every command, on Ansible's own
loader (KEY=VALUE by its splitter, JSON/YAML and @FILE by its DataLoader, Vault included)."""

from __future__ import annotations

import re
from pathlib import Path

# -e KEY=VALUE alone, unquoted, without spaces, escapes or a second '=': Ansible's splitter reads
# it as {KEY: "VALUE"}, and so does this module without importing Ansible's loader (slow to import).
_PLAIN_KEY_VALUE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=[^\s'\"\\=]*\Z")


class RenderError(Exception):
    """A problem the user can act on."""


# The command's Vault secrets (--vault-password-file, --ask-vault-pass), set once by the command.
_VAULT_SECRETS: list = []


def use_vault(password_files=(), password: str | None = None) -> None:
    """Decrypt vaulted -e files with these: each password file (a file, or a script that prints the
    password), and a password typed at --ask-vault-pass."""
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.vault import VaultSecret, get_file_vault_secret

    secrets = []
    for path in password_files:
        try:
            secret = get_file_vault_secret(filename=str(Path(path).expanduser()), loader=DataLoader())
            secret.load()
        except AnsibleError as error:
            raise RenderError(f"--vault-password-file {path}: {error.message}") from None
        secrets.append(("default", secret))
    if password is not None:
        secrets.append(("default", VaultSecret(password.encode())))
    _VAULT_SECRETS[:] = secrets


def _plain(value):
    """Ansible's tagged values as the plain ones they stand for."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def parse_extra_vars(values: list[str]) -> dict:
    """-e KEY=VALUE (several per -e), -e JSON/YAML mapping, -e @FILE (vaulted too); later ones win."""
    if all(_PLAIN_KEY_VALUE.match(value) for value in values):
        return dict(value.split("=", 1) for value in values)
    return _parsed_by_ansible(values)


def _parsed_by_ansible(values: list[str]) -> dict:
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.splitter import parse_kv

    loader = DataLoader()
    loader.set_vault_secrets(list(_VAULT_SECRETS))
    result: dict = {}
    for value in values:
        try:
            if value.startswith("@"):
                path = Path(value[1:]).expanduser()
                if not path.is_file():
                    raise RenderError(f"-e {value}: no such file; give the path of a YAML or JSON file of "
                                      f"variables after the @")
                if path.read_bytes().startswith(b"$ANSIBLE_VAULT") and not _VAULT_SECRETS:
                    raise RenderError(f"-e {value} is encrypted with Ansible Vault: give "
                                      f"--vault-password-file FILE or --ask-vault-pass")
                data = loader.load_from_file(str(path))
            elif value.lstrip().startswith(("{", "[")):
                data = loader.load(value)
            else:
                data = parse_kv(value)
                if not data or any(not key or key == "_raw_params" for key in data):
                    raise RenderError(f"-e {value!r}: expected KEY=VALUE, JSON or @FILE")
        except AnsibleError as error:
            raise RenderError(f"-e {value!r}: {error.message}") from None
        if data is None:
            continue
        if not isinstance(data, dict):
            raise RenderError(f"-e {value!r} must give a mapping of variables")
        result.update(_plain(data))
    return result
