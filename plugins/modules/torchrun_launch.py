#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: torchrun_launch
short_description: Start a training run on the cluster from the head node, or stop runs
version_added: "0.1.0"
description:
  - With O(state=started) the module runs on the head node. It renders the launch (C(mpirun) with
    one C(torchrun) per node, one MPI rank per GPU, or C(mpiexec) for HPE Cray PALS) with the
    collection's launch renderer, checks every node from the head over C(ssh) (O(check_nodes)),
    refuses to start while a process of an earlier torchfleet run is alive on any node, a node
    does not answer, or the rendezvous port is taken, puts the script's files where they are
    missing or stale (O(file_contents)), then starts the launcher, waits for it and reports its
    exit status, the first rank that failed and where every log is. One task and one connection
    from the controller; the head reaches the nodes itself, as C(mpirun) does a moment later.
  - With O(state=stopped) the module runs on any node and stops the torchfleet runs alive there.
  - Every process of a run carries E(TORCHFLEET_RUN_ID) in its environment; that is how runs are
    found. Open MPI's remote daemons (C(orted)) do not carry it; they exit by themselves, taking
    their ranks with them, when C(mpirun) goes.
options:
  state:
    description:
      - V(started) launches a run and waits for it; V(stopped) stops runs on this node.
    type: str
    choices: [started, stopped]
    default: started
  nodes:
    description:
      - The nodes of the run. Required with O(state=started).
    type: list
    elements: dict
    suboptions:
      name:
        description: Inventory name of the node, used in messages and results.
        type: str
        required: true
      address:
        description: The node's address on the cluster network; it goes into the hostfile.
        type: str
        required: true
      slots:
        description: Workers (GPUs) on the node.
        type: int
        required: true
      interface:
        description:
          - The network interface holding O(nodes[].address). Required with two or more nodes
            (NCCL and Gloo need it).
        type: str
  head:
    description:
      - Name of the head node (one of O(nodes)); it runs rank 0 and hosts the rendezvous. The
        module must run on this node. Required with O(state=started).
    type: str
  script:
    description: The training script's path on the nodes. Required with O(state=started).
    type: str
  script_args:
    description: Arguments for the script; they reach it on every rank exactly as given.
    type: list
    elements: str
    default: []
  run_id:
    description:
      - With O(state=started), the id of this run, 1 to 64 characters from letters, digits, V(_),
        V(.) and V(-). When omitted one is made, like V(tf-20261121-101502-ab12cd).
      - With O(state=stopped), stop only this run; when omitted, every run on the node.
    type: str
  mode:
    description:
      - V(torchrun) starts one C(torchrun) per node with Open MPI; V(rank) starts one Open MPI
        rank per slot running O(python) O(script); V(mpich) starts one C(torchrun) per node with
        HPE Cray PALS C(mpiexec).
    type: str
    choices: [torchrun, rank, mpich]
    default: torchrun
  master_port:
    description: Rendezvous port on the head node (E(MASTER_PORT) in rank mode).
    type: int
    default: 29500
  nproc_per_node:
    description:
      - Workers per node in V(torchrun) and V(mpich) modes; default the nodes' O(nodes[].slots),
        which must then be equal.
    type: int
  python:
    description: Python interpreter on the nodes (rank mode).
    type: str
    default: python3
  torchrun:
    description: C(torchrun) on the nodes (torchrun and mpich modes).
    type: str
    default: torchrun
  launcher:
    description:
      - Path of C(mpirun) or C(mpiexec) on the head; default V(mpirun), V(mpiexec) in mpich mode.
    type: str
  network:
    description: The cluster network as a CIDR; Open MPI then uses it for its own traffic.
    type: str
  env_pass:
    description:
      - Names of variables forwarded from the module's environment on the head to every rank
        (C(-x NAME) for Open MPI; values never appear on a command line). Each name listed here
        must be set in the module's environment (use the task's C(environment)), or the module
        fails naming the missing ones.
      - In addition the module always forwards E(PATH), E(LD_LIBRARY_PATH) and every E(NCCL_*)
        variable that is set in its environment (only those set, and not those torchfleet sets
        itself or that O(env_set) or O(env_secrets) name).
    type: list
    elements: str
    default: []
  env_secrets:
    description:
      - Secret variables, name to value (for example an API key read on the controller). The values
        go only into the launcher's environment and travel to the ranks by name; they are never
        on a command line, in the results or in logs the module writes.
    type: dict
    default: {}
  env_set:
    description: Variables set to these values on every rank.
    type: dict
    default: {}
  mpirun_extra_args:
    description:
      - Extra launcher options. Options torchfleet controls (process counts, mapping, hostfile,
        binding, output files, environment, interface MCA parameters) are refused.
    type: list
    elements: str
    default: []
  allow_run_as_root:
    description: Pass C(--allow-run-as-root) to Open MPI, which refuses root without it.
    type: bool
    default: false
  tree_spawn:
    description:
      - Let Open MPI's daemons start further daemons over SSH. By default only the head holds the
        cluster's private key, so the head starts every daemon (C(plm_rsh_no_tree_spawn)).
    type: bool
    default: false
  log_dir:
    description:
      - Directory on the head under which each run gets O(log_dir)/RUN_ID/, holding C(hostfile),
        C(launcher.log) (the launcher's stdout and stderr), C(ranks/) (Open MPI's per-rank
        files) and C(workers/) (torchrun's per-worker files, written on every node under the same
        path).
    type: path
    default: ~/torchfleet/runs
  launch_timeout:
    description:
      - Seconds the run may take; when they pass the run is stopped (TERM, then KILL after
        O(stop_grace)) and the module fails with RV(timed_out=true), naming the nodes that no
        longer answer C(ssh) from the head (RV(silent_nodes)). V(0) waits for ever.
    type: int
    default: 0
  silent_node_timeout:
    description:
      - Open MPI modes. Seconds after which a node that went silent (cut off from the network,
        powered off) ends the run. C(mpirun) gets TCP keepalive on its daemon connections
        (C(oob_tcp_keepalive_time), C(_intvl), C(_probes)), so it gives up the silent node's
        daemon and stops the run, the module fails naming that node (RV(failed_host)), and the
        daemon on the cut-off node, its connection to C(mpirun) lost, ends the ranks it started.
        The probes are answered by the node's kernel, so a busy or stalled rank does not count
        as silent.
      - V(0) leaves Open MPI's own settings, which give up a silent node after 480 s at best;
        O(launch_timeout) still bounds the run.
    type: int
    default: 120
  stop_grace:
    description: Seconds between SIGTERM and SIGKILL when a run is stopped.
    type: int
    default: 10
  chdir:
    description:
      - The launcher's working directory on the head. Open MPI starts the ranks on the other nodes
        in the same directory when it exists there (else in the home directory), so relative paths
        in O(script_args) mean the same everywhere. Default, the module's own temporary directory.
    type: path
  file_contents:
    description:
      - Files the run needs at the same path on every node (the script, its config), as paths
        mapped to base64 content; a leading C(~) is the training account's home. Before the
        start, the head hashes each node's copies and writes only the missing or different ones
        (whole or not at all, directories 0750, files 0640). Never shown in output.
    type: dict
    default: {}
  check_nodes:
    description:
      - Before the start, check every other node from the head over C(ssh) as the running
        account, the way C(mpirun) reaches them, in parallel. A node that does not answer and
        an earlier run still alive there refuse the launch; missing or different
        O(file_contents) are sent. After a run that failed, what is left of it on every node
        is ended the same way. The check's connections stay open (OpenSSH masters in a
        C(/tmp/tf-ssh-*) directory of the running account, closed when the module ends) and
        C(mpirun) starts its daemons through them instead of a new handshake per node, unless
        O(tree_spawn) is set or O(mpirun_extra_args) or the environment set Open MPI's own
        C(plm_rsh_*) options (a C(plm_rsh_args) in an Open MPI parameter file is not seen, and
        the masters' option would override it, so give it in O(mpirun_extra_args) instead). V(false)
        checks the head alone (Cray PALS nodes, which
        C(mpiexec) reaches without C(ssh)); the clean-up on the other nodes is then the
        caller's (O(state=stopped) on each).
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - With O(state=started) check mode renders and returns the exact command, hostfile and
        environment (secrets redacted), and neither runs nor writes anything. It fails where the
        start would fail, on any node where a run is alive, and on the head (the machine that
        holds the head's address) when the rendezvous port is taken.
      - With O(state=stopped) it reports the runs that would be stopped.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Run O(state=started) on the head node (C(delegate_to)), O(state=stopped) on every node.
  - If the module itself is interrupted (SIGTERM, SIGINT, SIGHUP, or the connection that started
    it goes away), it stops the run before it exits. A module killed with SIGKILL cannot; stop
    the run with O(state=stopped).
  - The launcher keeps only E(PATH), E(HOME), E(USER), E(LOGNAME), E(SHELL), E(LANG),
    E(LANGUAGE), E(LC_*), E(TZ), E(TMPDIR), E(LD_LIBRARY_PATH), E(SSH_AUTH_SOCK), E(OPAL_PREFIX),
    E(OMPI_MCA_*) and E(PMIX_MCA_*) of the module's environment, plus what O(env_pass) names, so
    that ranks on the head see the same environment as ranks on the other nodes.
  - Without root, only this user's processes are seen and stopped. Processes in other PID
    namespaces (containers) are not this node's and are left alone.
seealso:
  - name: torchrun (Elastic Launch)
    description: The per-node launcher started in torchrun and mpich modes.
    link: https://pytorch.org/docs/stable/elastic/run.html
author:
  - torchfleet contributors
"""

EXAMPLES = r"""
- name: Train on every node of the cluster, one torchrun per node
  torchfleet.cluster.torchrun_launch:
    nodes:
      - {name: gpu01, address: 10.10.10.11, slots: 8, interface: ens5}
      - {name: gpu02, address: 10.10.10.12, slots: 8, interface: ens5}
    head: gpu01
    script: /srv/train/ddp.py
    script_args: [--epochs, "10"]
    torchrun: /opt/torchfleet/env/bin/torchrun
    network: 10.10.10.0/24
    env_pass: [HF_HOME]
    env_secrets:
      WANDB_API_KEY: "{{ lookup('ansible.builtin.env', 'WANDB_API_KEY') }}"
    launch_timeout: 86400
  delegate_to: gpu01
  run_once: true
  register: torchfleet_run

- name: Show the command without running it
  torchfleet.cluster.torchrun_launch:
    nodes: [{name: gpu01, address: 10.10.10.11, slots: 8}]
    head: gpu01
    script: /srv/train/ddp.py
  check_mode: true
  register: torchfleet_plan

- name: Refuse to launch while a run is alive on any node
  torchfleet.cluster.torchrun_launch:
    state: stopped
  check_mode: true
  register: torchfleet_alive
  failed_when: torchfleet_alive.runs | length > 0

- name: Stop every torchfleet run on every node
  torchfleet.cluster.torchrun_launch:
    state: stopped
    stop_grace: 30
"""

RETURN = r"""
run_id:
  description: The run's id (E(TORCHFLEET_RUN_ID) of all its processes).
  returned: state=started
  type: str
  sample: tf-20261121-101502-ab12cd
argv:
  description: The launcher's command as a list, as run.
  returned: state=started
  type: list
  elements: str
command:
  description: RV(argv) as one shell-quoted string, for display.
  returned: state=started
  type: str
  sample: mpirun -np 2 --map-by ppr:1:node ... /srv/train/ddp.py "$@"' torchfleet --epochs 10
hostfile:
  description: The hostfile's text, head first.
  returned: state=started
  type: str
  sample: "10.10.10.11 slots=8\n10.10.10.12 slots=8\n"
hostfile_path:
  description: Where the hostfile is (or, in check mode, would be) written on the head.
  returned: state=started
  type: str
env:
  description:
    - Variables set in the launcher's environment and forwarded to every rank; forwarded names
      show as V(<inherited>), secrets as V(<redacted>).
  returned: state=started
  type: dict
  sample:
    TORCHFLEET_RUN_ID: tf-20261121-101502-ab12cd
    NCCL_SOCKET_IFNAME: ens5
    PATH: <inherited>
per_node_env:
  description: Values that differ on a node from RV(env) (Gloo's interface with mixed names).
  returned: state=started
  type: dict
nodes:
  description: Node names in launch order (head first; node rank order).
  returned: state=started
  type: list
  elements: str
world_size:
  description: Number of training processes.
  returned: state=started
  type: int
  sample: 16
log_dir:
  description: This run's directory on the head, O(log_dir)/RUN_ID.
  returned: state=started
  type: str
launcher_log:
  description: The launcher's combined stdout and stderr.
  returned: state=started
  type: str
rank_logs_dir:
  description:
    - Open MPI's per-rank files (C(1/rank.N/stdout), C(1/rank.N/stderr)), written on the node
      where each rank ran. Empty in mpich mode.
  returned: state=started
  type: str
worker_logs_dir:
  description:
    - torchrun's per-worker files (C(RDZV_*/attempt_N/LOCAL_RANK/stdout.log), C(stderr.log)),
      written on every node under this path. Empty in rank mode.
  returned: state=started
  type: str
rc:
  description: The launcher's exit status; death by signal N is 128+N.
  returned: state=started, when the launcher ran
  type: int
  sample: 0
duration:
  description: Seconds the launcher ran.
  returned: state=started, when the launcher ran
  type: float
  sample: 3611.52
timed_out:
  description: Whether the run outlived O(launch_timeout) and was stopped.
  returned: state=started, when the launcher ran
  type: bool
stdout_tail:
  description: The last lines of the launcher's log.
  returned: state=started, when the launcher ran
  type: list
  elements: str
rank0_tail:
  description: The last lines that global rank 0 printed (its log on the head), the run's own report.
  returned: state=started, when the launcher ran
  type: list
  elements: str
silent_nodes:
  description:
    - After a run that failed, timed out or was interrupted, the nodes that did not answer C(ssh)
      from the head when the module came to end what was left of the run there (cut off from
      the network, or down); empty when every node answered.
  returned: state=started, when the run failed and O(check_nodes) is true with more than one node
  type: list
  elements: str
  sample: [gpu02]
stopped_on_nodes:
  description:
    - After a run that failed, timed out or was interrupted, the processes of the run that were
      still alive on the other nodes and were ended (TERM, O(stop_grace), KILL), by node.
  returned: state=started, when the run failed and O(check_nodes) is true with more than one node
  type: dict
  sample: {gpu02: [4121, 4133]}
failed_rank:
  description:
    - Global rank of the first worker that failed, as reported by torchrun or Open MPI; null when
      no rank failure was reported (for example when the launcher itself failed).
  returned: state=started, when RV(rc) is not 0
  type: int
  sample: 3
failed_host:
  description:
    - Where that rank ran; the inventory name when the launch plan tells, else the host name
      torchrun or Open MPI printed.
    - With no failed rank, the node whose Open MPI daemon C(mpirun) lost (the node went down or
      off the network, or the daemon died), when Open MPI says so.
  returned: state=started, when RV(rc) is not 0
  type: str
failed_exit_code:
  description: That rank's exit status; death by signal N is 128+N.
  returned: state=started, when RV(rc) is not 0
  type: int
failed_log:
  description: That rank's log file, on RV(failed_host); the launcher log when none is known.
  returned: state=started, when RV(rc) is not 0
  type: str
failed_log_tail:
  description:
    - The last lines of RV(failed_log) when it is on the head and not empty, else of the
      launcher log.
  returned: state=started, when RV(rc) is not 0
  type: list
  elements: str
runs:
  description:
    - With O(state=stopped), the runs found alive on this node (in check mode, those that would
      be stopped). With O(state=started), when the launch was refused (check mode included), the
      runs that blocked it, on any node.
  returned: state=stopped; state=started when a live run refused the launch
  type: list
  elements: dict
  contains:
    node:
      description: With O(state=started), the node the run is alive on.
      type: str
    run_id:
      description: The run's id.
      type: str
    pids:
      description: Its processes on that node.
      type: list
      elements: int
stale_files:
  description:
    - Of O(file_contents), the paths missing or different on each node that has any, before the
      start sent them (in check mode, those it would send).
  returned: state=started
  type: dict
  sample: {gpu02: [/home/torchfleet/torchfleet/scripts/train.py]}
unreachable:
  description: The nodes the head could not check over C(ssh), when that refused the launch.
  returned: when a node did not answer
  type: list
  elements: str
port_holders:
  description: Processes seen holding the rendezvous port on the head, when it refused the launch.
  returned: when the port was taken
  type: list
  elements: str
  sample: ["pid 4242 (python3 -m http.server 29500)"]
survivors:
  description: Processes of a run still alive after SIGKILL (the module then fails).
  returned: when a process survived
  type: list
  elements: int
stopped:
  description: The processes stopped (in check mode, those that would be).
  returned: state=stopped
  type: list
  elements: dict
  contains:
    pid:
      description: Process id.
      type: int
    run_id:
      description: The run it belonged to.
      type: str
    cmdline:
      description: Its command line.
      type: str
"""

import base64
import errno
import glob
import hashlib
import json
import os
import pkgutil
import re
import secrets
import select
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_plan import (
    RESERVED_ENV,
    Node,
    Plan,
    PlanError,
    new_run_id,
    render,
    run_log_dirs,
)
from ansible_collections.torchfleet.cluster.plugins.module_utils import _node_probe
from ansible_collections.torchfleet.cluster.plugins.module_utils._node_probe import (
    end_run,
    find_run_processes,
    port_holders,
    port_in_use,
    probe,
    stop_processes,
)

STOP_HINT = "ansible-playbook launch.yml -e action=stop (or: torchfleet stop)"
TAIL_LINES = 20
# The head's checks of the other nodes: seconds for one node to answer, and how many at once
# (each ssh holds three pipes; 64 stays far from a 1024 file limit).
PROBE_TIMEOUT = 20
PROBE_FANOUT = 64
# Seconds an ssh master outlives its last session: it ends by itself if the module is killed.
MASTER_PERSIST = 60
# Always forwarded when set: the ranks need the launcher's programs, libraries and NCCL tuning.
AUTO_PASS = ("PATH", "LD_LIBRARY_PATH")
# What the launcher keeps of the module's environment. Ranks on the head inherit the launcher's
# whole environment while ranks elsewhere only get what is forwarded by name: keeping little
# makes the head's ranks see what the others see, and keeps Ansible's own variables out.
KEEP_ENV = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ",
                      "TMPDIR", "LD_LIBRARY_PATH", "SSH_AUTH_SOCK", "OPAL_PREFIX"})
KEEP_ENV_PREFIXES = ("LC_", "OMPI_MCA_", "PMIX_MCA_")


# ---------------------------------------------------------------------------------------------
# Pure helpers (unit-tested)
# ---------------------------------------------------------------------------------------------

def exit_status(returncode: int) -> int:
    """Shell convention: Popen's -N (killed by signal N) becomes 128+N, so it is never 0."""
    return 128 - returncode if returncode < 0 else returncode


def signal_name(status: int) -> str | None:
    if status <= 128:
        return None
    try:
        return signal.Signals(status - 128).name
    except ValueError:
        return None


def resolve_env_pass(explicit, environ, taken):
    """(names to forward, explicit names missing from environ). Explicit names are kept as
    given (the renderer checks them); automatic ones only when set and not `taken`."""
    names = list(dict.fromkeys(explicit))
    missing = [name for name in names if name not in environ]
    auto = [name for name in AUTO_PASS if name in environ]
    auto += sorted(name for name in environ if name.startswith("NCCL_"))
    names += [name for name in auto if name not in taken and name not in names]
    return names, missing


def launcher_env(environ, passed, rendered_env, secret_values):
    env = {name: value for name, value in environ.items()
           if name in KEEP_ENV or name.startswith(KEEP_ENV_PREFIXES) or name in passed}
    env.update(rendered_env)
    env.update(secret_values)
    return env


# torchrun's summary, one per node whose workers failed:
#   Root Cause (first observed failure):
#   [0]:
#     time      : 2026-11-21_06:37:49
#     host      : gpu02
#     rank      : 5 (local_rank: 1)
#     exitcode  : -9 (pid: 7689)  (SIGKILL)
_ROOT_CAUSE = "Root Cause (first observed failure):"
_SUMMARY_FIELD = re.compile(r"\b(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
_SUMMARY_RANK = re.compile(r"(\d+)\s*\(local_rank:\s*(\d+)\)")
_SUMMARY_EXIT = re.compile(r"(-?\d+)")


def parse_torchrun_failures(text: str) -> list[dict]:
    """Every root cause block in a launcher log, in the order they appear."""
    failures = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if _ROOT_CAUSE not in line:
            continue
        fields = {}
        for follow in lines[i + 1:i + 10]:
            match = _SUMMARY_FIELD.search(follow)
            if match:
                fields.setdefault(match.group(1), match.group(2).strip())
            if "traceback" in fields:
                break
        rank = _SUMMARY_RANK.match(fields.get("rank", ""))
        code = _SUMMARY_EXIT.match(fields.get("exitcode", ""))
        if rank and code:
            failures.append({"time": fields.get("time", ""), "host": fields.get("host") or None,
                             "rank": int(rank.group(1)), "local_rank": int(rank.group(2)),
                             "exit_code": exit_status(int(code.group(1)))})
    return failures


def first_torchrun_failure(text: str) -> dict | None:
    """With several nodes failing, the root cause is the earliest (times are to the second;
    ties go to the one printed first)."""
    failures = parse_torchrun_failures(text)
    if not failures:
        return None
    return min(enumerate(failures), key=lambda item: (item[1]["time"] or "~", item[0]))[1]


# Open MPI 4.x, a rank that exits non-zero:
#   Process name: [[28791,1],1]
#   Exit code:    3
# and one killed by a signal:
#   mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).
_MPI_EXIT = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(\d+)")
_MPI_SIGNAL = re.compile(r"process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)")


def parse_mpirun_failure(text: str) -> dict | None:
    """The first failed process Open MPI names: its MPI rank, host (when printed) and status."""
    found = []
    match = _MPI_EXIT.search(text)
    if match:
        found.append((match.start(), {"rank": int(match.group(1)), "host": None,
                                      "exit_code": int(match.group(2))}))
    match = _MPI_SIGNAL.search(text)
    if match:
        found.append((match.start(), {"rank": int(match.group(1)), "host": match.group(2),
                                      "exit_code": 128 + int(match.group(3))}))
    return min(found, key=lambda item: item[0])[1] if found else None


# Open MPI 4.x, when mpirun loses a node's daemon (orted): the node went down or off the network,
# or the daemon died. No rank is named; the node is, as the hostfile gave it:
#   ORTE has lost communication with a remote daemon.
#
#     HNP daemon   : [[16969,0],0] on node node0
#     Remote daemon: [[16969,0],2] on node 172.19.0.4
_MPI_LOST_DAEMON = re.compile(r"ORTE has lost communication with a remote daemon\.\s*\n"
                              r"(?:.*\n){0,3}?\s*Remote daemon\s*:\s*\S+ on node (\S+)")


def parse_lost_daemon(text: str) -> str | None:
    """The node (address or name, as in the hostfile) whose daemon mpirun lost first."""
    match = _MPI_LOST_DAEMON.search(text)
    return match.group(1) if match else None


def node_named(host: str, order) -> str:
    """The inventory name of a node Open MPI names by its hostfile address; else `host`."""
    return next((node.name for node in order if host in (node.address, node.name)), host)


def rank_node(rank: int, order, mode: str) -> str | None:
    """The node an MPI rank ran on: ranks fill the hostfile's slots in order (--map-by slot);
    with one process per node the MPI rank is the node's index."""
    if mode != "rank":
        return order[rank].name if 0 <= rank < len(order) else None
    for node in order:
        if rank < node.slots:
            return node.name
        rank -= node.slots
    return None


def tail(text: str, lines: int = TAIL_LINES) -> list[str]:
    return text.splitlines()[-lines:]


# ---------------------------------------------------------------------------------------------
# Processes of runs, on this node
# ---------------------------------------------------------------------------------------------

def group_runs(procs) -> list[dict]:
    runs: dict[str, list[int]] = {}
    for proc in procs:
        runs.setdefault(proc["run_id"], []).append(proc["pid"])
    return [{"run_id": run_id, "pids": pids} for run_id, pids in sorted(runs.items())]


# ---------------------------------------------------------------------------------------------
# The rendezvous port and the head's address
# ---------------------------------------------------------------------------------------------

def holds_address(address: str) -> bool:
    """Whether this machine has `address` (binding to an address it lacks fails)."""
    try:
        infos = socket.getaddrinfo(address, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    for family, _type, _proto, _name, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.bind((sockaddr[0], 0))
            return True
        except OSError as err:
            if err.errno != errno.EADDRNOTAVAIL:
                return True  # the address is here; something else is wrong with the probe
    return False


# ---------------------------------------------------------------------------------------------
# After a run that failed: what is left of it on the other nodes
# ---------------------------------------------------------------------------------------------

def end_run_on_nodes(nodes, head: str, ssh: str, python: str, run_id: str, grace: int,
                     timeout: int | None = None) -> dict:
    """End what is left of `run_id` on every node but the head (which the module swept itself),
    over the cluster's ssh, as `action=stop` would: TERM, `grace` seconds, KILL. Returns
    {"stopped": {name: [pids]}, "survivors": {name: [pids]}, "silent": [{name, address, error}]}.
    A node that does not answer within 5 s of connecting is silent: a node cut off from the
    network makes no rank fail, the others wait for it in a collective until mpirun gives up its
    daemon (silent_node_timeout) or launch_timeout, and only this tells which node it was."""
    others = [node for node in nodes if node.name != head]
    stop = {"stop": {"run_id": run_id, "grace": grace}}
    # A node's stop takes at most grace + 10 s (the wait after KILL), and a moment to scan.
    answers = probe_nodes(others, head, ssh, python, {node.name: stop for node in others},
                          timeout=timeout or grace + 20, connect_timeout=5)
    ended = {"stopped": {}, "survivors": {}, "silent": []}
    for node in others:
        answer = answers[node.name]
        if "error" in answer:
            ended["silent"].append({"name": node.name, "address": node.address, "error": answer["error"]})
            continue
        for key in ("stopped", "survivors"):
            if answer[key]:
                ended[key][node.name] = [proc["pid"] for proc in answer[key]]
    return ended


def cleanup_message(ended, name_silent: bool = True) -> str:
    """What the clean-up on the other nodes could not do, for the end of a failure message (a
    timeout's message names the silent nodes itself)."""
    said = ""
    if ended["survivors"]:
        said += "; processes survived SIGKILL on " + "; ".join(
            f"{name}: {', '.join(map(str, pids))}" for name, pids in ended["survivors"].items())
        said += " (uninterruptible I/O?): check them"
    if ended["silent"] and name_silent:
        said += ("; could not reach " + ", ".join(node["name"] for node in ended["silent"])
                 + f" to end what is left of the run there: once it is back, end it with {STOP_HINT}")
    return said


def timeout_message(run_id, timeout, grace, silent, run_dir) -> str:
    what = (f"run {run_id} outlived launch_timeout={timeout}s and was stopped (SIGTERM, SIGKILL "
            f"after {grace}s)")
    if silent:
        named = "; ".join(f"{node['name']} ({node['address']}): {node['error']}"
                          for node in silent)
        what += (f"; these nodes went silent, they do not answer ssh from the head: {named}. "
                 f"A node cut off keeps the other ranks waiting; what ran there may still run: "
                 f"once it is back, end it with {STOP_HINT}")
    elif silent is not None:
        what += "; every node answers ssh from the head, so the run itself was slow or hung"
    return f"{what}; logs under {run_dir}"


# ---------------------------------------------------------------------------------------------
# Logs
# ---------------------------------------------------------------------------------------------

def read_end(path: str, limit: int = 4 * 1024 * 1024) -> str:
    """The end of a log that may be many gigabytes: torchrun and Open MPI print their failure
    reports last."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def read_tail(path: str, lines: int = TAIL_LINES) -> list[str]:
    return tail(read_end(path, 256 * 1024), lines)


def _first_existing(pattern: str) -> str | None:
    matches = sorted(glob.glob(pattern))
    return matches[-1] if matches else None  # the latest torchrun attempt sorts last


def rank0_tail(mode: str, paths) -> list[str]:
    # Global rank 0 runs on the head: torchrun's worker 0 there, or Open MPI's rank 0.
    if mode == "rank":
        found = _first_existing(os.path.join(paths["ranks"], "*", "rank.0", "stdout"))
    else:
        found = _first_existing(os.path.join(paths["workers"], "*", "attempt_*", "0", "stdout.log"))
    return read_tail(found) if found else []


def describe_failure(text, order, mode, paths, nproc=None) -> dict:
    """failed_* result keys from the launcher log; None where the log does not tell."""
    local_names = {socket.gethostname(), socket.getfqdn()}
    failure = first_torchrun_failure(text) if mode != "rank" else None
    if failure:
        one_node = len(order) == 1
        host = order[0].name if one_node else failure["host"]
        # Every node runs nproc workers, node ranks in hostfile order: the inventory name follows
        # from the global rank, where torchrun only knows the host's own name for itself.
        if nproc and failure["rank"] is not None and 0 <= failure["rank"] // nproc < len(order):
            host = order[failure["rank"] // nproc].name
        log = (f"{paths['workers']}/*/attempt_*/{failure['local_rank']}/stderr.log")
        local = one_node or failure["host"] in local_names
        found = _first_existing(log) if local else None
        return {"failed_rank": failure["rank"], "failed_host": host,
                "failed_exit_code": failure["exit_code"], "failed_log": found or log,
                "failed_log_tail": (read_tail(found) if found else []) or tail(text)}
    failure = parse_mpirun_failure(text)
    if failure:
        host = rank_node(failure["rank"], order, mode) or failure["host"]
        if mode == "rank":
            log = f"{paths['ranks']}/*/rank.{failure['rank']}/stderr"
            found = _first_existing(log) if host == order[0].name else None
            return {"failed_rank": failure["rank"], "failed_host": host,
                    "failed_exit_code": failure["exit_code"], "failed_log": found or log,
                    "failed_log_tail": (read_tail(found) if found else []) or tail(text)}
        # A per-node launcher (torchrun) failed without a worker failure summary: report
        # the node; there is no worker rank to name.
        return {"failed_rank": None, "failed_host": host, "failed_exit_code": failure["exit_code"],
                "failed_log": paths["launcher"], "failed_log_tail": tail(text)}
    # No process failed as far as Open MPI knows, but a whole node may be gone: that node is
    # failed_host, with no rank and no exit code.
    lost = parse_lost_daemon(text)
    return {"failed_rank": None, "failed_host": node_named(lost, order) if lost else None,
            "failed_exit_code": None, "failed_log": paths["launcher"],
            "failed_log_tail": tail(text)}


def failure_message(run_id, rc, failure, paths) -> str:
    code = failure["failed_exit_code"]
    if code is None and failure["failed_host"]:
        what = (f"Open MPI lost contact with its daemon on {failure['failed_host']}: that node "
                f"went down or off the network, or the daemon died there; the ranks elsewhere "
                f"were stopped")
    elif code is None:
        what = (f"the launcher exited with rc {rc} without naming a failed rank: the run was "
                f"stopped from outside (state=stopped), or the launcher could not start it (a "
                f"node unreachable, a wrong path or option: see the launcher log)")
    else:
        name = signal_name(code)
        how = f"was killed by {name} (exit code {code})" if name else f"exited with code {code}"
        who = (f"rank {failure['failed_rank']}" if failure["failed_rank"] is not None
               else "the launcher")
        what = f"{who} on {failure['failed_host'] or 'an unknown host'} {how} first"
        if failure["failed_log"] != paths["launcher"]:
            what += f"; its log: {failure['failed_log']} on {failure['failed_host']}"
    return (f"run {run_id} failed (launcher rc {rc}): {what}; launcher log: {paths['launcher']}; "
            f"all logs of the run under {paths['run']} (failed_log_tail has the last lines)")


# ---------------------------------------------------------------------------------------------
# state=started
# ---------------------------------------------------------------------------------------------

def _env_value(value):
    # YAML turns `OMP_NUM_THREADS: 4` into an int; anything else odd is left to the renderer,
    # which names it.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


class _Interrupt:
    """Signals that mean 'stop': recorded here, acted on by the wait loop."""
    signum = None

    @classmethod
    def handler(cls, signum, _frame):
        cls.signum = signum


def _caller_gone() -> bool:
    """Ansible reads the module's stdout through a pipe (local) or sshd: when the reader is
    gone (ansible-playbook killed, connection lost) a write would fail. poll() tells now."""
    poller = select.poll()
    poller.register(1, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _fd, events in poller.poll(0))


def _stop_launch(proc, run_id, grace) -> list[dict]:
    """TERM the launcher's group (mpirun forwards it to every rank on every node), KILL after
    `grace`, then stop whatever of the run is left here: local ranks and torchrun workers run in
    process groups of their own and outlive a killed mpirun."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except OSError:
        pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
    return end_run(run_id, grace)[1]


def build(module, run_id, run_dir, control_dir=None):
    p = module.params
    env_set = {name: _env_value(value) for name, value in p["env_set"].items()}
    secret_values = {name: _env_value(value) for name, value in p["env_secrets"].items()}
    for name, value in secret_values.items():
        if not isinstance(value, str):
            module.fail_json(msg=f"env_secrets: {name} has no string value; give it one")
    taken = RESERVED_ENV | set(env_set) | set(secret_values)
    env_pass, missing = resolve_env_pass(p["env_pass"], os.environ, taken)
    nodes = tuple(Node(**node) for node in p["nodes"])
    ranks, workers = run_log_dirs(run_dir, p["mode"])
    paths = {"run": run_dir, "launcher": os.path.join(run_dir, "launcher.log"),
             "ranks": ranks or "", "workers": workers or ""}
    plan = Plan(
        nodes=nodes, head=p["head"], script=os.path.expanduser(p["script"]), run_id=run_id,
        hostfile_path=os.path.join(run_dir, "hostfile"), script_args=tuple(p["script_args"]),
        mode=p["mode"], port=p["master_port"], nproc_per_node=p["nproc_per_node"],
        python=p["python"], torchrun=p["torchrun"], launcher=p["launcher"],
        log_dir=paths["ranks"] or None, node_log_dir=paths["workers"] or None,
        network=p["network"], env_pass=tuple(env_pass), env_secrets=tuple(secret_values),
        env_set=env_set, mpirun_extra_args=tuple(p["mpirun_extra_args"]),
        allow_run_as_root=p["allow_run_as_root"], tree_spawn=p["tree_spawn"],
        ssh_control_path=f"{control_dir}/%C" if control_dir else None,
        silent_node_timeout=p["silent_node_timeout"],
    )
    try:
        rendered = render(plan)
    except PlanError as err:
        module.fail_json(msg=str(err), run_id=run_id)
    if missing:
        module.fail_json(msg=f"env_pass names {', '.join(missing)}, but the module's environment "
                             f"on the head has no such variable: set it for the task "
                             f"(environment:) or remove it from env_pass", run_id=run_id)
    return plan, rendered, secret_values, paths


def head_preflight(module, plan, run_dir, head):
    """Refuse what would stop the run on the head: a missing address, a taken rendezvous port, a
    used run id."""
    if not holds_address(head.address):
        module.fail_json(msg=f"this machine does not have the head's address {head.address} "
                             f"({head.name}): run the launch on the head node (delegate_to: "
                             f"{head.name}) or fix its address", run_id=plan.run_id)
    if port_in_use(plan.port):
        holders = port_holders(plan.port)
        held = f" by {', '.join(holders)}" if holders else ""
        module.fail_json(msg=f"refusing to launch: the rendezvous port {plan.port} is already in "
                             f"use on the head {head.name}{held}; choose another port "
                             f"(-e master_port=N) or stop the process holding it",
                         port_holders=holders, run_id=plan.run_id)
    if os.path.lexists(run_dir):
        module.fail_json(msg=f"{run_dir} already exists: run id {plan.run_id} was used before; "
                             f"give a new run_id or leave it unset", run_id=plan.run_id)


def probe_source() -> str:
    """_node_probe's text: a plain file from a checkout, a member of the module's zip under
    AnsiballZ (where inspect.getsource fails now and then)."""
    try:
        with open(_node_probe.__file__, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return pkgutil.get_data(_node_probe.__name__.rpartition(".")[0], "_node_probe.py").decode()


def probe_command(python: str) -> str:
    # ssh hands the remote side one command line, quoted here; the request travels on stdin.
    # -S: the probe needs the standard library alone, not the environment's site-packages.
    return shlex.join([python, "-S", "-c", probe_source()])


def probe_nodes(nodes, head: str, ssh: str, python: str, requests: dict,
                timeout: int = PROBE_TIMEOUT, connect_timeout: int | None = None,
                control_dir: str | None = None) -> dict:
    """_node_probe's answer to each node's request, {name: answer}: here for the head, over the
    cluster's ssh for the others, as the training account, the way mpirun reaches them. A node
    that does not answer within `timeout` seconds (or connect within `connect_timeout`, half of
    it by default) gets {"error": ...}. In parallel, at most PROBE_FANOUT at once: the slowest
    node bounds the wait. With `control_dir`, each connection stays open as an OpenSSH master
    there (see ssh_masters), for the next probe and for mpirun."""
    connect_timeout = connect_timeout or max(1, timeout // 2)
    sharing = ["-o", "ControlMaster=auto", "-o", f"ControlPath={control_dir}/%C",
               "-o", f"ControlPersist={MASTER_PERSIST}"] if control_dir else []
    remote = probe_command(python) if any(node.name != head for node in nodes) else None

    def ask(node):
        if node.name == head:
            try:
                return probe(requests[node.name])
            except OSError as err:
                return {"error": str(err)}
        argv = [ssh, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout}", *sharing,
                node.address, remote]
        try:
            done = subprocess.run(argv, input=json.dumps(requests[node.name]),
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"no answer within {timeout} s"}
        try:
            return json.loads(done.stdout)
        except ValueError:
            lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
            return {"error": lines[-1] if lines else f"ssh exited {done.returncode}"}
    if not nodes:
        return {}
    with ThreadPoolExecutor(max_workers=min(PROBE_FANOUT, len(nodes))) as pool:
        return dict(zip((node.name for node in nodes), pool.map(ask, nodes)))


def preflight_nodes(module, plan, run_dir, expect: dict, control_dir=None) -> dict:
    """Everything the start would trip over, on every node, before anything changes: a node ssh
    cannot reach, a run alive anywhere, the head's address, port and run id. Returns the files
    that are missing or stale on each node ({path: SHA-1} `expect`), {name: [paths]}."""
    head = next(node for node in plan.nodes if node.name == plan.head)
    nodes = plan.nodes if module.params["check_nodes"] else [head]
    ssh = module.get_bin_path("ssh", required=len(nodes) > 1)
    answers = probe_nodes(nodes, head.name, ssh, plan.python, {node.name: {"expect": expect} for node in nodes},
                          control_dir=control_dir)
    order = [node.name for node in nodes]
    lost = [name for name in order if "error" in answers[name]]
    if lost:
        named = "; ".join(f"{name}: {answers[name]['error']}" for name in lost)
        module.fail_json(msg=f"refusing to launch: the head {head.name} cannot reach {', '.join(lost)} "
                             f"over ssh as the training account, as mpirun would ({named}). Bring the "
                             f"node back, or run setup.yml again if its address or host key changed",
                         unreachable=lost, run_id=plan.run_id)
    runs = [{"node": name, **run} for name in order for run in group_runs(answers[name]["runs"])]
    if runs:
        listed = "; ".join(f"on {run['node']}: {run['run_id']} (pids {', '.join(map(str, run['pids']))})"
                           for run in runs)
        module.fail_json(msg=f"refusing to launch: an earlier torchfleet run is still alive {listed}. "
                             f"Stop it first with {STOP_HINT}, then launch again", runs=runs,
                         run_id=plan.run_id)
    head_preflight(module, plan, run_dir, head)
    return {name: answers[name]["stale"] for name in order if answers[name]["stale"]}


def send_files(module, plan, files: dict, stale: dict, control_dir=None) -> None:
    """Put the stale files ({path: base64 content} `files`) on the nodes that lack them, whole,
    in parallel."""
    nodes = [node for node in plan.nodes if node.name in stale]
    requests = {node.name: {"write": {path: files[path] for path in stale[node.name]}}
                for node in nodes}
    ssh = module.get_bin_path("ssh", required=any(node.name != plan.head for node in nodes))
    answers = probe_nodes(nodes, plan.head, ssh, plan.python, requests, control_dir=control_dir)
    failed = [name for name, answer in answers.items() if "error" in answer]
    if failed:
        module.fail_json(msg="could not put the script's files on " + "; ".join(
            f"{name}: {answers[name]['error']}" for name in failed) + "; nothing was started",
            stale_files=stale, run_id=plan.run_id)


def ssh_masters(module):
    """A directory for the OpenSSH masters the probe leaves open to each node, which mpirun's ssh
    then rides instead of a handshake of its own per node (plm_rsh_args, see _launch_plan); None
    where mpirun does not ssh from the head to every node itself (mpich mode, tree spawn, the
    head alone), in check mode, or when the user set Open MPI's rsh options, which ours would
    override. Short, in /tmp: a socket path has at most 107 bytes."""
    p = module.params
    if (module.check_mode or not p["check_nodes"] or p["tree_spawn"] or p["mode"] == "mpich"
            or len(p["nodes"]) < 2):
        return None
    if any("plm_rsh" in arg for arg in p["mpirun_extra_args"]) or any(
            name in os.environ for name in ("OMPI_MCA_plm_rsh_args", "OMPI_MCA_plm_rsh_agent")):
        return None
    try:
        return tempfile.mkdtemp(prefix="tf-ssh-", dir="/tmp")
    except OSError:
        return None


def close_ssh_masters(ssh: str, control_dir: str, nodes) -> None:
    """End the masters in `control_dir` (a run's sessions are over by now) and remove it."""
    if ssh and os.listdir(control_dir):
        def close(address):
            try:
                subprocess.run([ssh, "-o", f"ControlPath={control_dir}/%C", "-O", "exit", address],
                               capture_output=True, timeout=10)
            except subprocess.TimeoutExpired:
                pass  # it ends by itself MASTER_PERSIST seconds after its last session
        with ThreadPoolExecutor(max_workers=min(PROBE_FANOUT, len(nodes))) as pool:
            list(pool.map(close, [node["address"] for node in nodes]))
    shutil.rmtree(control_dir, ignore_errors=True)


def run_started(module):
    control_dir = ssh_masters(module)
    try:
        start_run(module, control_dir)
    finally:
        # fail_json and exit_json end the module through SystemExit: this runs after them too.
        if control_dir:
            # Not required=True: a missing ssh has failed the module already, with its own message.
            ssh = module.get_bin_path("ssh")
            others = [node for node in module.params["nodes"] if node["name"] != module.params["head"]]
            close_ssh_masters(ssh, control_dir, others)


def start_run(module, control_dir):
    p = module.params
    run_id = p["run_id"] or new_run_id(datetime.now(timezone.utc), secrets.token_hex(3))
    run_dir = os.path.join(p["log_dir"], run_id)
    plan, rendered, secret_values, paths = build(module, run_id, run_dir, control_dir)
    result = {
        "changed": False, "run_id": run_id, "argv": rendered.argv, "command": rendered.command,
        "hostfile": rendered.hostfile, "hostfile_path": plan.hostfile_path,
        "env": rendered.display_env, "per_node_env": rendered.per_node_env,
        "nodes": list(rendered.nodes), "world_size": rendered.world_size, "log_dir": run_dir,
        "launcher_log": paths["launcher"], "rank_logs_dir": paths["ranks"],
        "worker_logs_dir": paths["workers"],
    }
    # {absolute path: base64 content}: the probes hash the decoded bytes and write the text.
    files, digests = {}, {}
    for path, content in p["file_contents"].items():
        where = os.path.expanduser(path)
        if not os.path.isabs(where):
            module.fail_json(msg=f"file_contents: {path} is not an absolute path (or ~/...); the "
                                 f"nodes would each read it from another directory", run_id=run_id)
        try:
            digests[where] = hashlib.sha1(base64.b64decode(content, validate=True)).hexdigest()
        except (TypeError, ValueError):
            module.fail_json(msg=f"file_contents: the content given for {path} is not base64; encode "
                                 f"it with the torchfleet.cluster.file_b64 filter", run_id=run_id)
        files[where] = content
    stale = preflight_nodes(module, plan, run_dir, digests, control_dir)
    result["stale_files"] = stale
    if module.check_mode:
        module.exit_json(**result)
    if stale:
        send_files(module, plan, files, stale, control_dir)
        result["changed"] = True

    env = launcher_env(os.environ, set(rendered.inherit), rendered.env, secret_values)
    absent = [name for name in (*rendered.inherit, *rendered.secrets) if name not in env]
    if absent:  # mpirun would only warn and start the ranks without them
        module.fail_json(msg=f"not in the launcher's environment: {', '.join(absent)}", **result)
    try:
        os.makedirs(p["log_dir"], mode=0o750, exist_ok=True)
        os.mkdir(run_dir, 0o750)
        os.chmod(run_dir, 0o750)  # mkdir's mode is cut by the umask
        with open(os.open(plan.hostfile_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640),
                  "w") as handle:
            handle.write(rendered.hostfile)
        log = os.open(paths["launcher"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
    except OSError as err:
        module.fail_json(msg=f"cannot prepare the run directory {run_dir}: {err}", **result)

    result["changed"] = True
    watched = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous = {signum: signal.signal(signum, _Interrupt.handler) for signum in watched}
    started = time.monotonic()
    timed_out, reason, survivors = False, None, []
    try:
        # A session of its own: one killpg reaches the launcher, and a terminal's ^C reaches
        # only the module, which then stops the run in order.
        proc = subprocess.Popen(rendered.argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=p["chdir"])
    except OSError as err:
        module.fail_json(msg=f"cannot start {rendered.argv[0]}: {err}", **result)
    finally:
        os.close(log)
    try:
        while True:
            try:
                proc.wait(timeout=0.1)  # the run's end is seen within 0.1 s
                break
            except subprocess.TimeoutExpired:
                pass
            if p["launch_timeout"] and time.monotonic() - started >= p["launch_timeout"]:
                timed_out = True
            elif _Interrupt.signum is not None:
                reason = signal.Signals(_Interrupt.signum).name
            elif _caller_gone():
                reason = "the loss of the connection that started it"
            if timed_out or reason:
                survivors = _stop_launch(proc, run_id, p["stop_grace"])
                break
        if not (timed_out or reason):
            # The launcher is gone; nothing of the run should be left on the head.
            leftovers, survivors = end_run(run_id, p["stop_grace"])
            if leftovers:
                module.warn(f"{len(leftovers)} process(es) of run {run_id} outlived the launcher "
                            f"on the head and were stopped")
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    rc = exit_status(proc.returncode)
    result.update(rc=rc, duration=round(time.monotonic() - started, 3), timed_out=timed_out,
                  stdout_tail=read_tail(paths["launcher"]), rank0_tail=rank0_tail(plan.mode, paths))
    # After a run that failed or was stopped, nothing of it may stay on any node. Open MPI ends
    # the ranks it started, but torchrun's workers, in process groups of their own, can outlive
    # a daemon that lost its mpirun. PALS nodes take no ssh (check_nodes false): Ansible does it.
    ended = None
    if (rc != 0 or timed_out or reason) and p["check_nodes"] and len(plan.nodes) > 1:
        ended = end_run_on_nodes(plan.nodes, plan.head, module.get_bin_path("ssh", required=True),
                                 plan.python, run_id, p["stop_grace"])
        result.update(stopped_on_nodes=ended["stopped"],
                      silent_nodes=[node["name"] for node in ended["silent"]])
    left = cleanup_message(ended, name_silent=not timed_out) if ended else ""
    if survivors:
        pids = [proc_["pid"] for proc_ in survivors]
        module.fail_json(msg=f"run {run_id}: processes {', '.join(map(str, pids))} survived "
                             f"SIGKILL on the head; check them (uninterruptible I/O?){left}",
                         survivors=pids, **result)
    if timed_out:
        # Which nodes still answer tells a node gone silent from a run that hung by itself.
        silent = ended["silent"] if ended else None
        module.fail_json(msg=timeout_message(run_id, p["launch_timeout"], p["stop_grace"], silent,
                                             run_dir) + left, **result)
    if reason:
        module.fail_json(msg=f"the module was interrupted by {reason}; run {run_id} was stopped; "
                             f"logs under {run_dir}{left}", **result)
    if rc != 0:
        by_name = {node.name: node for node in plan.nodes}
        order = [by_name[name] for name in rendered.nodes]
        nproc = plan.nproc_per_node or order[0].slots
        failure = describe_failure(read_end(paths["launcher"]), order, plan.mode, paths, nproc)
        result.update(failure)
        module.fail_json(msg=failure_message(run_id, rc, failure, paths) + left, **result)
    module.exit_json(**result)


# ---------------------------------------------------------------------------------------------
# state=stopped
# ---------------------------------------------------------------------------------------------

def run_stopped(module):
    run_id = module.params["run_id"]
    procs = find_run_processes({run_id} if run_id else None)
    result = {"changed": bool(procs), "runs": group_runs(procs),
              "stopped": [{key: proc[key] for key in ("pid", "run_id", "cmdline")}
                          for proc in procs]}
    if module.check_mode or not procs:
        module.exit_json(**result)
    survivors = stop_processes(procs, module.params["stop_grace"])
    if survivors:
        pids = ", ".join(f"{proc['pid']} ({proc['run_id']})" for proc in survivors)
        module.fail_json(msg=f"processes survived SIGKILL: {pids}; check them (uninterruptible "
                             f"I/O, or another PID namespace's view?)",
                         survivors=[proc["pid"] for proc in survivors], **result)
    module.exit_json(**result)


NODE_OPTIONS = {
    "name": {"type": "str", "required": True},
    "address": {"type": "str", "required": True},
    "slots": {"type": "int", "required": True},
    "interface": {"type": "str"},
}
ARGUMENT_SPEC = {
    "state": {"type": "str", "default": "started", "choices": ["started", "stopped"]},
    "nodes": {"type": "list", "elements": "dict", "options": NODE_OPTIONS},
    "head": {"type": "str"},
    "script": {"type": "str"},
    "script_args": {"type": "list", "elements": "str", "default": []},
    "run_id": {"type": "str"},
    "mode": {"type": "str", "default": "torchrun", "choices": ["torchrun", "rank", "mpich"]},
    "master_port": {"type": "int", "default": 29500},
    "nproc_per_node": {"type": "int"},
    "python": {"type": "str", "default": "python3"},
    "torchrun": {"type": "str", "default": "torchrun"},
    "launcher": {"type": "str"},
    "network": {"type": "str"},
    # Names only, never values: no_log=False says so (the name contains "pass").
    "env_pass": {"type": "list", "elements": "str", "default": [], "no_log": False},
    "env_secrets": {"type": "dict", "default": {}, "no_log": True},
    "env_set": {"type": "dict", "default": {}},
    "mpirun_extra_args": {"type": "list", "elements": "str", "default": []},
    "allow_run_as_root": {"type": "bool", "default": False},
    "tree_spawn": {"type": "bool", "default": False},
    "log_dir": {"type": "path", "default": "~/torchfleet/runs"},
    "launch_timeout": {"type": "int", "default": 0},
    "silent_node_timeout": {"type": "int", "default": 120},
    "stop_grace": {"type": "int", "default": 10},
    "chdir": {"type": "path"},
    "file_contents": {"type": "dict", "default": {}, "no_log": True},
    "check_nodes": {"type": "bool", "default": True},
}


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "started", ("nodes", "head", "script"))],
        supports_check_mode=True,
    )
    for name in ("launch_timeout", "silent_node_timeout", "stop_grace"):
        if module.params[name] < 0:
            module.fail_json(msg=f"{name} must be 0 or more seconds, got {module.params[name]}")
    if module.params["state"] == "stopped":
        run_stopped(module)
    else:
        run_started(module)


if __name__ == "__main__":
    main()
