"""Filter `torchfleet.cluster.launch_problems`: what is wrong with a launch request, as messages."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence

from ansible_collections.torchfleet.cluster.plugins.module_utils._slurm import SlurmError, check_name, check_time_limit

DOCUMENTATION = r"""
name: launch_problems
short_description: What is wrong with a launch request, each problem with its fix
version_added: 1.0.0
description:
  - Checks a launch request on the controller, before anything on a node changes, and returns one
    message per problem, each naming the variable, its value and how to fix it. An empty list
    means the request is good.
  - One filter call instead of one assert task per concern, because each task costs the launch
    tens of milliseconds even when it passes.
  - Reads the controller's files (the script and its files) and environment (the secrets).
options:
  _input:
    description:
      - The request, with keys action, script, shared_storage, lists (script_args, files, env_pass,
        env_secrets, mpirun_extra_args), nproc_per_node, nodes (each node's hostvars, in the
        group's order, read once, as each read of hostvars costs the controller time per node),
        master_port, log_dir, group, group_hosts, play_hosts, mode, head, head_torchrun, and
        (optional) head_mpiexec and head_mpirun (MPICH's mpiexec and Open MPI's mpirun that setup
        recorded on the head), mpich_launcher, scheduler, tree_spawn, slurm (partition, account, time_limit, gpus_per_node) and
        reserved_action (what -e action= gave; refused, as Ansible reserves the name).
    type: dict
    required: true
"""

EXAMPLES = r"""
# fail + when: the filter runs once when the request is good (an assert's fail_msg is templated,
# and so the filter run again, even when the assertion holds).
- name: Check the launch request
  vars:
    _problems: "{{ _launch_request | torchfleet.cluster.launch_problems }}"
  ansible.builtin.fail:
    msg: "{{ _problems | join(' ') }}"
  when: _problems | length > 0
"""

RETURN = r"""
_value:
  description: One message per problem, in the order the checks run; empty when there is none.
  type: list
  elements: str
"""

EXAMPLE_LISTS = {
    "script_args": ["--epochs", "3"],
    "files": ["data.csv"],
    "env_pass": ["NCCL_DEBUG"],
    "env_secrets": ["WANDB_API_KEY"],
    "mpirun_extra_args": ["--mca", "btl_tcp_links", "2"],
}
# The script and its files travel base64 in the launch module's arguments, and on to each node
# that lacks them: right for code and configuration, not for data.
FILES_LIMIT_MIB = 16

# A shell character anywhere, or an option followed by a space (a value in the same item).
SHELL_LIKE = re.compile(r"[;|&$`<>()\n]|^-\S*\s")


def _is_list(value) -> bool:
    # A string is a sequence too: "WANDB_API_KEY" would become thirteen one-letter names.
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, Mapping))


def _nproc_problems(request: dict) -> list[str]:
    nproc = str(request["nproc_per_node"])
    if nproc != "auto" and not re.fullmatch(r"[1-9][0-9]*", nproc):
        return [f"nproc_per_node is '{nproc}': give auto (the GPU count) or a whole number of workers "
                f"per node, such as 2."]
    # The launch applies one count to every node (the head's), and torchrun needs the same count
    # everywhere: a per-node nproc_per_node (a hostfile's slots) would be silently ignored.
    by_count: dict[str, list[str]] = {}
    for node in request["nodes"]:
        by_count.setdefault(str(node.get("nproc_per_node", "auto")), []).append(node["inventory_hostname"])
    if len(by_count) <= 1:
        return []
    counts = "; ".join(f"{count} on {', '.join(hosts)}" for count, hosts in by_count.items())
    return [f"nproc_per_node differs between nodes ({counts}), but a launch runs the same number of "
            f"workers on every node (torchrun needs that, and the launch applies one count to all): "
            f"make the counts equal in the inventory (slots in a hostfile), or give one for all with "
            f"-e nproc_per_node=N."]


def _size_problems(paths: list[str]) -> list[str]:
    sizes = {path: os.path.getsize(path) for path in paths}
    total = sum(sizes.values())
    if total <= FILES_LIMIT_MIB * 2**20:
        return []
    largest = ", ".join(f"{path} {size / 2**20:.1f} MiB"
                        for path, size in sorted(sizes.items(), key=lambda item: -item[1])[:3])
    return [f"The script and its files come to {total / 2**20:.1f} MiB ({largest}), over the "
            f"{FILES_LIMIT_MIB} MiB a launch carries to the nodes in its own arguments. Put data and "
            f"checkpoints where every node reads them (shared storage, or copied once by your own "
            f"task) and pass their path in script_args; or, when the script itself is on shared "
            f"storage, use -e shared_storage=true."]


def _shape_problem(request: dict) -> str | None:
    """No script, or a list variable that is not a list: the other checks need both, so this
    problem is said alone."""
    if not request["script"]:
        return "Name the training script: ansible-playbook launch.yml -e script=train.py"
    for key, value in request["lists"].items():
        if not _is_list(value):
            return (f"{key} must be a list, for example -e '{json.dumps({key: EXAMPLE_LISTS[key]})}', "
                    f"so each item arrives exactly as given; it is {json.dumps(value)}.")
    return None


def _by_pals(request: dict) -> bool:
    """Cray PALS starts the nodes' processes itself: Ansible copies the files, not the module."""
    return request["mode"] == "mpich" and request.get("mpich_launcher") == "pals"


def _start_problems(request: dict) -> list[str]:
    lists = request["lists"]
    problems = []
    shared = request["shared_storage"]
    if not shared and not os.path.isfile(request["script"]):
        problems.append(f"The script {request['script']} is not a file on the controller. Give its path "
                        f"(relative to where you run ansible-playbook), or -e shared_storage=true when "
                        f"the nodes already see it at that path.")
    missing = [] if shared else [path for path in lists["files"] if not os.path.isfile(path)]
    if missing:
        problems.append(f"These files are not on the controller: {', '.join(missing)}.")
    elif not shared and not _by_pals(request) and os.path.isfile(request["script"]):
        problems += _size_problems([request["script"], *lists["files"]])
    problems += _nproc_problems(request)
    port = str(request["master_port"])
    if not (port.isdigit() and 1024 <= int(port) <= 65535):
        problems.append(f"master_port is '{port}': give the rendezvous port on the head as a number "
                        f"from 1024 to 65535 (default 29500).")
    if not re.match(r"[/~]", request["log_dir"]):
        problems.append(f"log_dir is '{request['log_dir']}': give an absolute path on the nodes, or one "
                        f"under the training account's home such as ~/torchfleet/runs (a relative path "
                        f"would depend on where each process starts).")
    # mpirun runs without a shell: a `;` is a plain character and "--mca x y" one word, so such an
    # item never means what it would mean typed in a shell.
    shell_like = "', '".join(arg for arg in lists["mpirun_extra_args"] if SHELL_LIKE.search(arg))
    if shell_like:
        problems.append(f"mpirun_extra_args holds '{shell_like}': no shell "
                        f"reads these arguments, so shell characters (; | & $ ` < > ( )) stay plain text "
                        f"and an option with its value in one item is one word. Give each option and each "
                        f"value as its own list item, for example "
                        f"-e '{json.dumps({'mpirun_extra_args': EXAMPLE_LISTS['mpirun_extra_args']})}'.")
    unset = [name for name in lists["env_secrets"] if not os.environ.get(name)]
    if unset:
        problems.append(f"These secrets are not set in the controller's environment: {', '.join(unset)}. "
                        f"Export them before running ansible-playbook (their values are never printed).")
    # A run always spans the whole group, but with --limit the script would be copied to, and live
    # runs looked for on, only some of the nodes.
    left_out = [host for host in request["group_hosts"] if host not in request["play_hosts"]]
    if left_out:
        problems.append(f"This launch runs on {len(request['play_hosts'])} of the "
                        f"{len(request['group_hosts'])} nodes (left out: {', '.join(left_out)}), but a run "
                        f"always uses every node of group '{request['group']}': run without --limit (or, "
                        f"for part of the nodes, an inventory that lists only them).")
    return problems


def _scheduler_problems(request: dict) -> list[str]:
    """What Slurm would refuse, or cannot run, that the controller can tell alone (the head's
    sbatch and partitions are checked on the head by the launch module)."""
    scheduler = str(request.get("scheduler") or "none")
    slurm = request.get("slurm") or {}
    if scheduler not in ("none", "slurm"):
        return [f"scheduler is '{scheduler}': give none (mpirun over ssh) or slurm (an sbatch job)"
                + ("; no PBS server is driven by torchfleet: write a batch script with `torchfleet "
                   "render --format pbs` and submit it with qsub." if scheduler.lower() == "pbs" else ".")]
    if scheduler == "none":
        given = [f"slurm_{key}" for key, value in slurm.items() if value not in ("", None, 0, "0")]
        return [f"{', '.join(given)} given without -e scheduler=slurm: add it to launch through Slurm, "
                f"or remove them."] if given else []
    problems = []
    if request["mode"] == "mpich":
        problems.append("scheduler=slurm runs Open MPI's mpirun inside the allocation; launch_mode=mpich "
                        "(MPICH's mpiexec) cannot run under it: use launch_mode=torchrun or rank.")
    if str(request.get("tree_spawn")).lower() in ("true", "yes", "1"):
        problems.append("scheduler=slurm: Slurm starts mpirun's daemons, so tree_spawn cannot apply; remove it.")
    try:
        if slurm.get("time_limit"):
            check_time_limit(slurm["time_limit"])
        for key in ("partition", "account"):
            if slurm.get(key):
                check_name(slurm[key], f"slurm_{key}")
    except SlurmError as err:
        problems.append(f"{err}.")
    gpus = str(slurm.get("gpus_per_node", 0))
    if not gpus.isdigit():
        problems.append(f"slurm_gpus_per_node is '{gpus}': give a whole number of GPUs per node (0 for none).")
    return problems


def launch_problems(request: dict) -> list[str]:
    # -e action=stop was launch.yml's stop before launch_action; Ansible reserves the name.
    given = request.get("reserved_action")
    if given:
        return [f"-e action={given}: Ansible reserves the name action; use -e launch_action={given}"
                + (" (or: torchfleet stop)." if given == "stop" else ".")]
    problems = []
    if request["action"] == "start":
        shape = _shape_problem(request)
        if shape:
            return [shape]
        problems = _start_problems(request) + _scheduler_problems(request)
    # setup.yml caches both; a node without them was never set up, or its cache expired.
    without_setup = [node["inventory_hostname"] for node in request["nodes"]
                     if "preflight_net" not in node or "python_env_torchrun" not in node]
    if without_setup:
        problems.append(f"No setup facts for {', '.join(without_setup)}: run `ansible-playbook "
                        f"setup.yml -i INVENTORY` first, from the same directory (facts are cached in "
                        f".cache/facts).")
    # python_env_engine=none records no torchrun; without this check the launch would fail on the
    # nodes, looking for a torchrun on PATH.
    elif request["action"] == "start" and request["mode"] in ("torchrun", "mpich") and not request["head_torchrun"]:
        problems.append(f"launch_mode={request['mode']} runs torchrun, but setup recorded none on "
                        f"{request['head']} (python_env_engine=none uses the node's own Python): use -e "
                        f"launch_mode=rank, or set up an environment with PyTorch (python_env_engine=venv "
                        f"or conda).")
    elif request["action"] == "start" and request["mode"] == "mpich":
        problems += _mpich_problems(request)
    elif request["action"] == "start" and request.get("head_mpiexec") and not request.get("head_mpirun"):
        # Plain mpirun would be MPICH's there (the alternative), and fail on Open MPI's options.
        problems.append(f"launch_mode={request['mode']} runs Open MPI's mpirun, but setup installed MPICH "
                        f"alone on {request['head']}: use -e launch_mode=mpich, or run `ansible-playbook "
                        f"setup.yml -i INVENTORY` (mpi_implementation=openmpi) to add Open MPI beside it.")
    return problems


def _mpich_problems(request: dict) -> list[str]:
    if not request.get("head_mpiexec"):
        return [f"launch_mode=mpich runs MPICH's mpiexec, but setup recorded none on {request['head']}: "
                f"run `ansible-playbook setup.yml -i INVENTORY -e mpi_implementation=mpich` first (MPICH "
                f"goes beside Open MPI; each is called by its full path)."]
    if request.get("mpich_launcher") not in ("hydra", "pals"):
        return [f"mpich_launcher is '{request.get('mpich_launcher')}': give hydra (MPICH's Hydra, Intel "
                f"MPI) or pals (HPE Cray PALS), or leave it unset for what setup read from mpiexec."]
    return []


class FilterModule:
    def filters(self):
        return {"launch_problems": launch_problems}
