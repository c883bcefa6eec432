# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Read the host lists that schedulers and MPI users already have into torchfleet's nodes.

Used by the ``torchfleet.cluster.hostfile`` inventory plugin and by the ``torchfleet`` command.
Standard library only, no Ansible import.

Formats
-------
``mpi``
    One host per line: ``host``, ``host slots=N`` (Open MPI; a later ``max_slots=M`` is accepted
    and ignored) or ``host:N`` (MPICH). IPv6 addresses are written bare (``fe80::1``), or in
    brackets to give slots MPICH-style (``[fe80::1]:4``). Every host once.
``pbs``
    ``$PBS_NODEFILE``: one bare host per line, repeated once per slot. Repeats need not be
    consecutive; hosts keep the order of their first appearance.
``slurm``
    ``$SLURM_JOB_NODELIST`` syntax: ``gpu[01-04,07],login-a[1-2]``. Zero padding is kept; several
    bracket groups in one name expand as Slurm does (leftmost varies slowest). A file may hold the
    nodelist on one line or spread over several. A nodelist carries no slot counts.
``auto``
    ``slurm`` when every line is a single word and some word holds ``,`` or a ``[`` after a name
    (neither can be an MPI or PBS host); else ``pbs`` when every line is a bare host and some host
    repeats; else ``mpi``.

In every format ``#`` starts a comment (whole line or trailing) and blank lines are skipped.

Public API
----------
``HostfileError(ValueError)``: ``path``, ``line`` (1-based, or None) and ``problem``; ``str()``
    reads ``PATH, line N: PROBLEM``, and the problem says how to fix it.
``Host(name, slots, line)``: ``slots`` is None when the file gives none.
``parse_hostfile(text, path, fmt="auto", slots_per_node=None) -> list[Host]``
``read_hostfile(path, fmt="auto", slots_per_node=None) -> list[Host]``: the CLI's entry point.
``is_hostfile(path) -> bool``: whether to read ``path`` as a hostfile rather than hand it to Ansible.
``host_vars(host)``, ``to_inventory(hosts, group)``: the variables the inventory plugin sets.
``expand_nodelist(nodelist, path, line)``, ``detect_format(text)``, ``parse_mpi``, ``parse_pbs``,
``parse_slurm``.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
from dataclasses import dataclass

FORMATS = ("auto", "mpi", "pbs", "slurm")

# A nodelist like gpu[1-99999999] would otherwise fill memory; no job has this many nodes.
MAX_HOSTS = 65536

# Files that are Ansible's to read, whatever they hold (see is_hostfile).
ANSIBLE_SUFFIXES = (".yml", ".yaml", ".json", ".ini", ".toml", ".cfg", ".py", ".sh")

_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(r"%s(?:\.%s)*\Z" % (_LABEL, _LABEL))
_DIGITS_AND_DOTS = re.compile(r"[0-9.]+\Z")
_COUNT = re.compile(r"[0-9]+\Z")
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?\Z")
_SLOTS_KEYS = ("slots",)
_MAX_SLOTS_KEYS = ("max_slots", "max-slots")
_MPI_FORMS = "'host', 'host slots=N' (optionally followed by max_slots=M) or 'host:N'"


class HostfileError(ValueError):
    """A hostfile that cannot be read; the message names the file, the line and the fix."""

    def __init__(self, problem: str, path: str = "<hostfile>", line: int | None = None):
        self.problem = problem
        self.path = path
        self.line = line
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class Host:
    name: str  # the host as written (IPv6 without brackets): inventory name and ansible_host
    slots: int | None  # workers on this host, None when the file gives no count
    line: int  # where the host is (first) listed


def _strip_comment(raw: str) -> str:
    return raw.split("#", 1)[0].strip()


def _content_lines(text: str):
    """(line number, content) for every line that holds more than a comment."""
    for number, raw in enumerate(text.splitlines(), start=1):
        content = _strip_comment(raw)
        if content:
            yield number, content


def _no_hosts(text: str, path: str, fix: str) -> HostfileError:
    lines = text.splitlines()
    if not text:
        return HostfileError(f"the file is empty; {fix}", path, 1)
    which = ("its only line is blank or a comment" if len(lines) == 1
             else f"all {len(lines)} lines are blank or comments")
    return HostfileError(f"end of file and no host listed: {which}; {fix}",
                         path, len(lines))


def host_key(name: str) -> str:
    """The identity of a host for finding repeats: case-insensitive names, canonical addresses."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name.lower()


def check_host(name: str, path: str, line: int | None, fmt: str = "mpi") -> str:
    """Return ``name`` if it is a host name, IPv4 or IPv6 address; else raise with the reason."""
    if ":" in name:
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            raise HostfileError(f"{name!r} is not a valid IPv6 address; check the address "
                                "(for example fe80::1)", path, line) from None
        return name
    if _DIGITS_AND_DOTS.match(name):
        try:
            ipaddress.IPv4Address(name)
        except ValueError:
            raise HostfileError(f"{name!r} is not a valid IPv4 address: write four numbers from 0 "
                                "to 255 without leading zeros (for example 10.0.0.11)", path, line) from None
        return name
    if len(name) <= 253 and _HOSTNAME.match(name):
        return name
    hint = ""
    if "[" in name or "]" in name or "," in name:
        hint = ("; this looks like a Slurm nodelist: set format: slurm (or give it as nodelist)"
                if fmt != "slurm" else "")
    elif "=" in name:
        hint = "; the host name comes first on the line, then slots=N"
    raise HostfileError(f"{name!r} is not a valid host name or IP address: a host name is letters, "
                        "digits, '-' and '_' in dot-separated labels of at most 63 characters, none "
                        f"starting or ending with '-'{hint}", path, line)


def _count(value: str, token: str, example: str, path: str, line: int) -> int:
    """The slot count ``value`` taken from ``token``; ``example`` shows the right form."""
    if not value:
        raise HostfileError(f"no slot count in {token!r}; write {example} with N the number of "
                            "workers (usually GPUs) on the host, or leave the count out", path, line)
    if not _COUNT.match(value) or int(value) < 1:
        raise HostfileError(f"bad slot count in {token!r}: {value!r} is not a whole number of 1 or "
                            f"more; write {example} with N the number of workers (usually GPUs) on "
                            "the host", path, line)
    return int(value)


def _split_mpi_host(token: str, path: str, line: int):
    """The host and the MPICH-style count (or None) of a line's first word."""
    if token.startswith("["):
        match = re.match(r"\[([^\[\]]*)\](?::(.*))?\Z", token)
        if not match:
            raise HostfileError(f"{token!r}: write an IPv6 address in brackets as [ADDRESS] or "
                                "[ADDRESS]:N, or bare without slots", path, line)
        address, count = match.group(1), match.group(2)
        if ":" not in address:
            raise HostfileError(f"{token!r}: brackets are only for IPv6 addresses; write a name "
                                "or IPv4 address bare (slots as host:N or host slots=N)", path, line)
        check_host(address, path, line)
        if count is None:
            return address, None
        return address, _count(count, token, f"[{address}]:N", path, line)
    if token.count(":") >= 2:
        try:
            ipaddress.IPv6Address(token)
        except ValueError:
            raise HostfileError(f"{token!r} is neither 'host:N' nor an IPv6 address; write one "
                                "colon for slots (gpu01:4), and an IPv6 address with slots in "
                                "brackets ([fe80::1]:4)", path, line) from None
        return token, None
    if ":" in token:
        host, colon, count = token.partition(":")
        if not host:
            raise HostfileError(f"{token!r} has no host before ':'; write host:N", path, line)
        check_host(host, path, line)
        return host, _count(count, token, f"{host}:N", path, line)
    return check_host(token, path, line), None


def _mpi_line(content: str, path: str, line: int) -> Host:
    words = content.split()
    name, slots = _split_mpi_host(words[0], path, line)
    max_slots = None
    for word in words[1:]:
        key, equals, value = word.partition("=")
        if not equals or not key:
            if key in _SLOTS_KEYS + _MAX_SLOTS_KEYS or word.startswith("=") or word.endswith("="):
                raise HostfileError(f"{content!r}: write slots=N as one word, with no spaces "
                                    "around '='", path, line)
            raise HostfileError(f"unexpected {word!r} after the host {name!r}: list one host per "
                                f"line, as {_MPI_FORMS}", path, line)
        if key in _SLOTS_KEYS:
            if slots is not None:
                raise HostfileError(f"{content!r} gives the slot count twice; keep one of "
                                    f"{name}:N and slots=N", path, line)
            slots = _count(value, word, "slots=N", path, line)
        elif key in _MAX_SLOTS_KEYS:
            if max_slots is not None:
                raise HostfileError(f"{content!r} gives {key} twice; keep one", path, line)
            max_slots = _count(value, word, f"{key}=N", path, line)
        else:
            raise HostfileError(f"unknown keyword {key!r} in {content!r}; a hostfile line is "
                                f"{_MPI_FORMS}", path, line)
    if max_slots is not None and slots is not None and max_slots < slots:
        raise HostfileError(f"max_slots={max_slots} is less than slots={slots}; raise max_slots "
                            "or drop it (torchfleet ignores it)", path, line)
    return Host(name, slots, line)


def parse_mpi(text: str, path: str = "<hostfile>") -> list[Host]:
    """An MPI hostfile (Open MPI or MPICH syntax): every host once, slots where given."""
    hosts: list[Host] = []
    seen: dict[str, Host] = {}
    for line, content in _content_lines(text):
        host = _mpi_line(content, path, line)
        first = seen.get(host_key(host.name))
        if first is not None:
            raise HostfileError(f"host {host.name!r} is listed again (first on line {first.line}); "
                                "list each host once and give its worker count with slots=N "
                                "(or host:N); a file that repeats bare hosts once per slot is a "
                                "PBS nodefile: set format: pbs", path, line)
        seen[host_key(host.name)] = host
        hosts.append(host)
    if not hosts:
        raise _no_hosts(text, path, "list one host per line, for example 'gpu01 slots=8'")
    return hosts


def parse_pbs(text: str, path: str = "<hostfile>") -> list[Host]:
    """A PBS nodefile: each host once per slot; slots are the repeats, order the first appearance."""
    firsts: dict[str, tuple[str, int]] = {}
    counts: dict[str, int] = {}
    for line, content in _content_lines(text):
        words = content.split()
        if len(words) > 1:
            raise HostfileError(f"{content!r} has {len(words)} words; a PBS nodefile line is one "
                                "host name (repeated on further lines, once per slot); for "
                                "'host slots=N' lines set format: mpi", path, line)
        name = words[0]
        if name.startswith("[") or (":" in name and name.count(":") < 2):
            raise HostfileError(f"{name!r}: a PBS nodefile has no slot counts, only host names "
                                "repeated once per slot; for 'host:N' lines set format: mpi",
                                path, line)
        check_host(name, path, line, fmt="pbs")
        key = host_key(name)
        firsts.setdefault(key, (name, line))
        counts[key] = counts.get(key, 0) + 1
    if not firsts:
        raise _no_hosts(text, path, "a PBS nodefile lists each host once per slot, one per line")
    return [Host(name, counts[key], line) for key, (name, line) in firsts.items()]


def _nodelist_items(nodelist: str, path: str, line: int):
    """Split at the commas outside brackets: (item, its 1-based position in the line)."""
    depth, start, opened = 0, 0, 0
    for index, char in enumerate(nodelist):
        if char.isspace():
            raise HostfileError(f"space in Slurm nodelist {nodelist!r} at character {index + 1}; "
                                "a nodelist has no spaces: separate hosts with ',' (gpu01,gpu02) "
                                "or put them on separate lines", path, line)
        if char == "[":
            if depth:
                raise HostfileError(f"nested '[' in Slurm nodelist {nodelist!r} at character "
                                    f"{index + 1} (the '[' at character {opened + 1} is still "
                                    "open); close each range with ']' first, as in gpu[01-04]",
                                    path, line)
            depth, opened = 1, index
        elif char == "]":
            if not depth:
                raise HostfileError(f"']' without '[' in Slurm nodelist {nodelist!r} at character "
                                    f"{index + 1}; write ranges as gpu[01-04]", path, line)
            depth = 0
        elif char == "," and not depth:
            yield nodelist[start:index], start
            start = index + 1
    if depth:
        raise HostfileError(f"unclosed '[' in Slurm nodelist {nodelist!r} at character "
                            f"{opened + 1}; close the range with ']', as in gpu[01-04]", path, line)
    yield nodelist[start:], start


def _expand_ranges(body: str, item: str, path: str, line: int) -> list[str]:
    if not body:
        raise HostfileError(f"empty brackets in {item!r}; put numbers or ranges in them, as in "
                            "gpu[01-04,07]", path, line)
    values: list[str] = []
    for piece in body.split(","):
        match = _RANGE.match(piece)
        if not match:
            what = "an empty entry" if not piece else repr(piece)
            raise HostfileError(f"{what} in the brackets of {item!r} is not a number or a range "
                                "LOW-HIGH of numbers; write for example gpu[01-04,07]", path, line)
        low, high = match.group(1), match.group(2)
        if high is None:
            values.append(low)
            continue
        if int(high) < int(low):
            raise HostfileError(f"range {piece!r} in {item!r} runs backwards; write the lower "
                                f"number first ({high}-{low})", path, line)
        if int(high) - int(low) + 1 > MAX_HOSTS:
            raise HostfileError(f"range {piece!r} in {item!r} names {int(high) - int(low) + 1} "
                                f"hosts, more than the {MAX_HOSTS} torchfleet reads; check the "
                                "numbers", path, line)
        values.extend(str(number).zfill(len(low)) for number in range(int(low), int(high) + 1))
    return values


def _expand_item(item: str, path: str, line: int) -> list[str]:
    """Expand one comma-free item (brackets already checked for balance and nesting)."""
    names = [""]
    rest = item
    while rest:
        literal, bracket, rest = rest.partition("[")
        names = [name + literal for name in names]
        if not bracket:
            break
        body, close_bracket, rest = rest.partition("]")
        expanded = _expand_ranges(body, item, path, line)
        if len(names) * len(expanded) > MAX_HOSTS:
            raise HostfileError(f"{item!r} names more than the {MAX_HOSTS} hosts torchfleet "
                                "reads; check the ranges", path, line)
        names = [name + value for name in names for value in expanded]
    return names


def expand_nodelist(nodelist: str, path: str = "<nodelist>", line: int = 1) -> list[str]:
    """The host names of a Slurm nodelist, in Slurm's order (no check for repeats)."""
    names: list[str] = []
    for item, position in _nodelist_items(nodelist, path, line):
        if not item:
            where = "at the end" if position == len(nodelist) else f"at character {position + 1}"
            raise HostfileError(f"empty item in Slurm nodelist {nodelist!r} {where}; remove the "
                                "extra ',' (hosts are separated by one comma)", path, line)
        for name in _expand_item(item, path, line):
            check_host(name, path, line, fmt="slurm")
            names.append(name)
        if len(names) > MAX_HOSTS:
            raise HostfileError(f"Slurm nodelist {nodelist!r} names more than the {MAX_HOSTS} "
                                "hosts torchfleet reads", path, line)
    return names


def parse_slurm(text: str, path: str = "<nodelist>", slots_per_node: int | None = None) -> list[Host]:
    """A Slurm nodelist (one line, or several that together form the list)."""
    slots_per_node = check_slots_per_node(slots_per_node)
    hosts: list[Host] = []
    seen: dict[str, Host] = {}
    for line, content in _content_lines(text):
        for name in expand_nodelist(content, path, line):
            first = seen.get(host_key(name))
            if first is not None:
                where = "earlier on this line" if first.line == line else f"first on line {first.line}"
                raise HostfileError(f"host {name!r} is in the Slurm nodelist twice ({where}); "
                                    "list each node once", path, line)
            host = Host(name, slots_per_node, line)
            seen[host_key(name)] = host
            hosts.append(host)
    if not hosts:
        raise _no_hosts(text, path, "give the nodelist as Slurm prints it, for example "
                                    "gpu[01-04],login-a1")
    return hosts


def check_slots_per_node(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise HostfileError(f"{value!r} is not a slot count; give a whole number of 1 or more "
                            "(the GPUs per node, as in $SLURM_GPUS_ON_NODE), or leave it unset so "
                            "that each node uses all its GPUs", "option slots_per_node")
    return value


def detect_format(text: str) -> str:
    """``slurm``, ``pbs`` or ``mpi`` for ``text`` by the rule of format ``auto``."""
    words = [content.split() for line_number, content in _content_lines(text)]
    if not words or any(len(line) > 1 for line in words):
        return "mpi"
    tokens = [line[0] for line in words]
    if any("," in token or "[" in token.lstrip("[") for token in tokens):
        return "slurm"
    if any(token.startswith("[") or (":" in token and token.count(":") < 2) for token in tokens):
        return "mpi"
    keys = [host_key(token) for token in tokens]
    return "pbs" if len(set(keys)) < len(keys) else "mpi"


def parse_hostfile(text: str, path: str = "<hostfile>", fmt: str = "auto",
                   slots_per_node: int | None = None) -> list[Host]:
    """The hosts of ``text`` in ``fmt``; ``slots_per_node`` fills in hosts the file gives no count."""
    if fmt not in FORMATS:
        raise HostfileError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}", path)
    slots_per_node = check_slots_per_node(slots_per_node)
    if fmt == "auto":
        fmt = detect_format(text)
    if fmt == "slurm":
        return parse_slurm(text, path, slots_per_node)
    hosts = parse_pbs(text, path) if fmt == "pbs" else parse_mpi(text, path)
    if slots_per_node is None:
        return hosts
    return [Host(h.name, slots_per_node if h.slots is None else h.slots, h.line) for h in hosts]


def read_hostfile(path, fmt: str = "auto", slots_per_node: int | None = None) -> list[Host]:
    """Read and parse the hostfile at ``path`` (the CLI's entry point)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise HostfileError(f"cannot read it: {error.strerror}", path) from error
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise HostfileError("not UTF-8 text; a hostfile is plain text, one host per line",
                            path, line) from error
    return parse_hostfile(text, path, fmt, slots_per_node)


def is_hostfile(path) -> bool:
    """Whether ``path`` is a hostfile for torchfleet to read, rather than an Ansible inventory.

    The rule: a regular file that is not executable (Ansible runs those as inventory scripts),
    whose name does not end in one of ``ANSIBLE_SUFFIXES``, and whose text reads without error
    in format ``auto``. Ansible inventories fail that read: YAML has ``key:`` lines, INI has
    ``[group]`` headers and ``host var=value`` lines, JSON starts with ``{``. A file of bare host
    names is both; read as a hostfile it gives the same hosts, in group ``cluster``.
    """
    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    if not stat.S_ISREG(mode) or mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH):
        return False
    if path.lower().endswith(ANSIBLE_SUFFIXES):
        return False
    try:
        read_hostfile(path)
    except HostfileError:
        return False
    return True


def host_vars(host: Host) -> dict:
    """The variables of one node: ``ansible_host``, and ``nproc_per_node`` when slots are known."""
    result: dict = {"ansible_host": host.name}
    if host.slots is not None:
        result["nproc_per_node"] = host.slots
    return result


def to_inventory(hosts: list[Host], group: str = "cluster") -> dict:
    """A YAML-inventory-shaped dict of ``hosts``: the same hosts and variables as the plugin's."""
    if not hosts:
        raise HostfileError("no hosts to put in the inventory", "<hosts>")
    return {"all": {"children": {group: {
        "hosts": {host.name: host_vars(host) for host in hosts},
        "vars": {"torchfleet_head": hosts[0].name},
    }}}}
