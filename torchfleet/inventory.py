"""The cluster as the inventory and setup's cached facts describe it: the one reader of both.

-i takes Ansible inventories and MPI/PBS/Slurm hostfiles (turned into YAML inventories); the
hosts and their variables come from `ansible-inventory`, as the playbooks would see them; the
facts setup gathered come from the jsonfile cache, without a connection.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from torchfleet.collection import module_util, plugin_util
from torchfleet.extra_vars import RenderError, parse_extra_vars


class InventoryError(Exception):
    """The -i given cannot be used: a usage error (exit 2), named with its fix."""


# --- -i: inventories and hostfiles ---------------------------------------------------------------

def inventory_paths(given: list[str], scratch: Path) -> list[str]:
    """The -i paths, hostfiles turned into YAML inventories in `scratch`; default ./inventory."""
    given = given or (["inventory"] if Path("inventory").is_dir() else [])
    if not given:
        raise InventoryError("no inventory: give -i PATH (an Ansible inventory or an MPI/PBS/Slurm "
                             "hostfile), or run from a directory with inventory/")
    hostfile = plugin_util("_hostfile")
    result = []
    for number, path in enumerate(given):
        if not Path(path).exists():
            raise InventoryError(f"inventory {path} does not exist; give -i the path of an Ansible "
                                 f"inventory or of an MPI/PBS/Slurm hostfile")
        if hostfile.is_hostfile(path):
            inventory = hostfile.to_inventory(hostfile.read_hostfile(path))
            target = scratch / f"hostfile{number}.yml"
            target.write_text(json.dumps(inventory, indent=1) + "\n")  # JSON is YAML
            result.append(str(target))
        else:
            if _meant_as_hostfile(path, hostfile.ANSIBLE_SUFFIXES):
                # A broken hostfile: Ansible would read it as an INI inventory without group
                # `cluster` and only say the group is empty. This error names the line and the fix.
                hostfile.read_hostfile(path)
            result.append(str(Path(path).resolve()))
    return result


# An INI inventory's [group] or [group:children] header (an IPv6 hostfile entry has '::' or digits).
_INI_SECTION = re.compile(r"\s*\[[A-Za-z_][A-Za-z0-9_-]*(:[a-z]+)?\]\s*([#;].*)?")
_HOSTFILE_KEYS = ("slots", "max_slots", "max-slots")


def _meant_as_hostfile(path: str, ansible_suffixes: tuple[str, ...]) -> bool:
    """A plain file that fails to read as a hostfile and has nothing of an Ansible inventory: no
    inventory suffix, not executable (a script), not a YAML/JSON mapping, no INI [group] header
    and no `host var=value` other than a hostfile's slots."""
    import yaml

    file = Path(path)
    if not file.is_file() or os.access(file, os.X_OK) or path.lower().endswith(ansible_suffixes):
        return False
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError):
        return True  # the hostfile reader says so (unreadable, not UTF-8 text)
    try:
        if isinstance(yaml.safe_load(text), dict):
            return False
    except yaml.YAMLError:
        pass  # not YAML: INI, or a hostfile
    for line in text.splitlines():
        if _INI_SECTION.fullmatch(line):
            return False
        words = line.split("#", 1)[0].split()[1:]
        if any("=" in word and word.split("=", 1)[0] not in _HOSTFILE_KEYS for word in words):
            return False
    return True


# --- the hosts and their variables ---------------------------------------------------------------

def ansible_tool(name: str) -> list[str]:
    """argv to run an ansible-core CLI: beside this Python, on PATH, else as a module."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return [str(beside)]
    found = shutil.which(name)
    return [found] if found else [sys.executable, "-m", "ansible.cli." + name.split("-", 1)[1]]


def cluster_group(extra: dict) -> str:
    """The inventory group of the nodes: -e torchfleet_group, as the playbooks take it, else cluster."""
    return str(extra.get("torchfleet_group") or "cluster")


def read_inventory(inventories: list[str], env: dict, limit: str | None = None, group: str = "cluster"):
    """(hosts of `group` in inventory order, {host: vars}) from `ansible-inventory --list`."""
    argv = [*ansible_tool("ansible-inventory"), "--list"]
    for inventory in inventories:
        argv += ["-i", inventory]
    if limit:
        argv += ["--limit", limit]
    # Inventory variables only: the facts are read from the cache separately.
    env = dict(env, ANSIBLE_CACHE_PLUGIN="ansible.builtin.memory")
    result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        raise RenderError(f"ansible-inventory failed: {result.stderr.strip()}")
    data = json.loads(result.stdout)
    hostvars = data.get("_meta", {}).get("hostvars", {})

    def hosts_of(name, seen):
        if name in seen:
            return []
        seen.add(name)
        entry = data.get(name, {})
        found = list(entry.get("hosts", []))
        for child in entry.get("children", []):
            found += hosts_of(child, seen)
        return found

    hosts = list(dict.fromkeys(hosts_of(group, set())))
    if not hosts:
        raise RenderError(f"the inventory has no hosts in group {group!r}; put every node in it, or "
                          f"name the group of your nodes with -e torchfleet_group=NAME")
    return hosts, {host: hostvars.get(host, {}) for host in hosts}


def head_name(hosts: list[str], hostvars: dict, extra: dict) -> str | None:
    """The head, as the launch role takes it (launch_head): torchfleet_head, else the group's first node."""
    first = hostvars.get(hosts[0], {}) if hosts else {}
    return extra.get("torchfleet_head") or first.get("torchfleet_head") or (hosts[0] if hosts else None)


def head_account(hosts: list[str], hostvars: dict, extra: dict, group: str = "cluster") -> tuple[str, str, str]:
    """(the head, its training account, the runs' directory), from the inventory and -e."""
    name = head_name(hosts, hostvars, extra)
    if name is None or name not in hostvars:
        raise InventoryError(f"torchfleet_head {name!r} is not in group {group} of the inventory")
    first = hostvars[hosts[0]]
    user = str(extra.get("cluster_user_name") or first.get("cluster_user_name") or "torchfleet")
    workdir = str(extra.get("cluster_user_workdir") or first.get("cluster_user_workdir") or "~/torchfleet")
    # As the launch takes it (launch_log_dir or log_dir, -e over the inventory), else the role's default.
    given = module_util("_launch_resolution").from_variables(
        {key: value for key, value in {**first, **extra}.items() if key in ("launch_log_dir", "log_dir")}
    ).get("log_dir")
    log_dir = str(given or workdir + "/runs")
    if log_dir.startswith("~/") or log_dir == "~":
        log_dir = f"~{user}" + log_dir[1:]  # the training account's home, whoever reads it
    return name, user, log_dir


def cluster_vars(given: list[str], extra_vars: list[str]) -> dict:
    """The head, the training account, the runs' directory (head_account) and the head's
    inventory variables, from the inventories -i and the extra vars -e."""
    from torchfleet.ansible_calls import ansible_env

    extra = parse_extra_vars(extra_vars)
    group = cluster_group(extra)
    with tempfile.TemporaryDirectory(prefix="torchfleet-inv-") as scratch:
        inventories = inventory_paths(given, Path(scratch))
        hosts, hostvars = read_inventory(inventories, dict(os.environ, **ansible_env()), group=group)
    head, user, log_dir = head_account(hosts, hostvars, extra, group)
    return {"head": head, "user": user, "log_dir": log_dir, "hostvars": hostvars[head], "group": group}


# --- setup's cached facts ------------------------------------------------------------------------

def _untag(value):
    """ansible-core 2.19 keeps tagged values as {"value": ..., "__ansible_type": ...}."""
    if isinstance(value, dict):
        if "__ansible_type" in value and "value" in value:
            return _untag(value["value"])
        return {key: _untag(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_untag(item) for item in value]
    return value


def read_facts(cache_dir: Path, host: str) -> dict | None:
    """A host's facts from the fact cache: plain `HOST` (torchfleet.cluster.json_facts, which the
    playbooks use) or `s1_HOST` (ansible.builtin.jsonfile of ansible-core 2.19, where a user's own
    configuration asks for it), whichever was written last."""
    found = []
    for name in (host, f"s1_{host}"):
        path = Path(cache_dir) / name
        try:
            found.append((path.stat().st_mtime, path))
        except OSError:
            continue
    # The newer first; the other only where the newer cannot be read.
    for _mtime, path in sorted(found, key=lambda item: item[0], reverse=True):
        try:
            data = json.loads(path.read_text())
            if isinstance(data, dict) and "__payload__" in data:
                data = json.loads(data["__payload__"])
        except (OSError, ValueError, RecursionError):  # facts are the nodes' word: too deep is unreadable
            continue
        return _untag(data) if isinstance(data, dict) else None
    return None
