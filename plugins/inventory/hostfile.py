# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Inventory plugin `torchfleet.cluster.hostfile`: an MPI hostfile, PBS nodefile or Slurm nodelist."""

from __future__ import annotations

DOCUMENTATION = r"""
name: hostfile
short_description: Use an MPI hostfile, a PBS nodefile or a Slurm nodelist as the cluster
version_added: 1.0.0
description:
  - Reads the nodes of an MPI hostfile, a PBS nodefile or a Slurm nodelist into one group
    (O(group), default C(cluster)), in the order of the file.
  - Every host gets C(ansible_host) (the host as written) and, when the file gives a slot count,
    C(nproc_per_node); without a count the playbooks use every GPU the node has.
  - The first host is the head; the group variable C(torchfleet_head) names it.
  - "An MPI hostfile lists one host per line: V(host), V(host slots=N) (Open MPI; a following
    V(max_slots=M) is accepted and ignored) or V(host:N) (MPICH). IPv6 addresses are written bare,
    or in brackets to give slots as V([fe80::1]:4)."
  - A PBS nodefile (C($PBS_NODEFILE)) repeats each host once per slot; the repeats are counted.
  - "A Slurm nodelist is written as C($SLURM_JOB_NODELIST) gives it: V(gpu[01-04,07],login-a[1-2]).
    Zero padding is kept and several ranges in one name expand as Slurm does. It carries no slot
    counts: give O(slots_per_node)."
  - In files, V(#) starts a comment and blank lines are skipped.
  - A malformed file fails this inventory source with a message naming the file, the line, what is
    wrong and how to fix it. Ansible reports that as a warning and goes on without these hosts
    unless C(ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED=true); the playbooks then stop on the empty
    group.
  - The configuration file must be named C(*.hostfile.yml), C(*.hostfile.yaml),
    C(torchfleet_hostfile.yml) or C(torchfleet_hostfile.yaml).
extends_documentation_fragment:
  - constructed
options:
  plugin:
    description: The name of this plugin; marks the file as its configuration.
    required: true
    type: str
    choices: [torchfleet.cluster.hostfile]
  path:
    description:
      - The hostfile, nodefile, or a file holding a Slurm nodelist.
      - A relative path is relative to the directory of this configuration file.
      - Exactly one of O(path) and O(nodelist) is given, except that with O(format=slurm) and
        neither, the nodelist is read from the environment variable C(SLURM_JOB_NODELIST).
    type: str
  nodelist:
    description:
      - A Slurm nodelist given in the configuration instead of a file, for example
        V(gpu[01-04],gpu07).
      - Implies O(format=slurm).
    type: str
  format:
    description:
      - How to read O(path).
      - V(auto) reads a file as V(slurm) when every line is one word and some word holds V(,) or a
        V([) after a name (neither can be a host of the other formats); else as V(pbs) when every
        line is a bare host and some host repeats; else as V(mpi).
    type: str
    choices: [auto, mpi, pbs, slurm]
    default: auto
  group:
    description: The group the hosts go into; the playbooks use C(cluster).
    type: str
    default: cluster
  slots_per_node:
    description:
      - Workers (GPUs) on every node whose file gives no slot count; the only source of counts for
        a Slurm nodelist (for example the value of C($SLURM_GPUS_ON_NODE)).
      - Unset, such hosts get no C(nproc_per_node) and the playbooks use every GPU they find.
    type: int
notes:
  - The variables set here have inventory precedence, so C(group_vars/) next to the configuration
    file, or C(-e), override C(torchfleet_head) and C(nproc_per_node).
"""

EXAMPLES = r"""
---
# cluster.hostfile.yml: an Open MPI / MPICH hostfile next to it
plugin: torchfleet.cluster.hostfile
path: my-hosts
---
# slurm.hostfile.yml: a Slurm allocation of four GPUs per node
plugin: torchfleet.cluster.hostfile
nodelist: gpu[01-04,07]
slots_per_node: 4
---
# torchfleet_hostfile.yml: inside a PBS job, with a group per rack from the host names
plugin: torchfleet.cluster.hostfile
path: /var/spool/pbs/aux/1234.pbs01
format: pbs
keyed_groups:
  - key: inventory_hostname.split('-')[0]
    prefix: rack
"""

import os
import re

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Constructable
from ansible.utils.vars import combine_vars

from ansible_collections.torchfleet.cluster.plugins.plugin_utils._hostfile import (
    HostfileError,
    host_vars,
    parse_hostfile,
    read_hostfile,
)

_CONFIG_NAMES = ("torchfleet_hostfile.yml", "torchfleet_hostfile.yaml")
_CONFIG_SUFFIXES = (".hostfile.yml", ".hostfile.yaml")
_GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class InventoryModule(BaseInventoryPlugin, Constructable):

    NAME = "torchfleet.cluster.hostfile"

    def verify_file(self, path):
        if not super().verify_file(path):
            return False
        name = os.path.basename(path)
        return name in _CONFIG_NAMES or name.endswith(_CONFIG_SUFFIXES)

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache=cache)
        self._read_config_data(path)
        group = self._group(path)
        try:
            hosts = self._read_hosts(path)
        except HostfileError as error:
            # from None: the message already says everything; Ansible would repeat the cause.
            raise AnsibleParserError(f"{error} (inventory source {path})") from None
        self.inventory.add_group(group)
        for host in hosts:
            self.inventory.add_host(host.name, group=group)
            for key, value in host_vars(host).items():
                self.inventory.set_variable(host.name, key, value)
        self.inventory.set_variable(group, "torchfleet_head", hosts[0].name)
        self._construct(hosts, group)

    def _read_hosts(self, config_path):
        fmt = self.get_option("format")
        file_path = self.get_option("path")
        nodelist = self.get_option("nodelist")
        slots = self.get_option("slots_per_node")
        if file_path and nodelist is not None:
            raise AnsibleParserError(f"{config_path}: give either path (a file) or nodelist (a Slurm "
                                     "nodelist), not both")
        if nodelist is not None or (fmt == "slurm" and not file_path):
            if fmt not in ("auto", "slurm"):
                raise AnsibleParserError(f"{config_path}: nodelist is a Slurm nodelist, but format "
                                         f"is {fmt}; drop format or set it to slurm")
            source = f"{config_path} (option nodelist)"
            if nodelist is None:
                nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
                source = "$SLURM_JOB_NODELIST"
                if not nodelist:
                    raise AnsibleParserError(f"{config_path}: format is slurm but there is no "
                                             "nodelist: give path or nodelist, or run inside a "
                                             "Slurm job (which sets SLURM_JOB_NODELIST)")
            return parse_hostfile(nodelist, source, "slurm", slots)
        if not file_path:
            raise AnsibleParserError(f"{config_path}: say where the hosts are: path: FILE (an MPI "
                                     "hostfile, PBS nodefile or Slurm nodelist), or nodelist: "
                                     "gpu[01-04]")
        file_path = os.path.expanduser(file_path)
        if not os.path.isabs(file_path):
            file_path = os.path.join(os.path.dirname(os.path.abspath(config_path)), file_path)
        return read_hostfile(file_path, fmt, slots)

    def _group(self, config_path):
        group = self.get_option("group")
        if not group or not _GROUP_NAME.match(group) or group in ("all", "ungrouped"):
            raise AnsibleParserError(f"{config_path}: group {group!r} is not usable; name a group "
                                     "of letters, digits and '_' that does not start with a digit "
                                     "(not all or ungrouped), for example cluster")
        return group

    def _construct(self, hosts, group):
        strict = self.get_option("strict")
        group_vars = self.inventory.groups[group].get_vars()
        for host in hosts:
            variables = combine_vars(group_vars, self.inventory.get_host(host.name).get_vars())
            self._set_composite_vars(self.get_option("compose"), variables, host.name, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), variables, host.name,
                                              strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), variables, host.name,
                                           strict=strict)
