"""The launch module's questions to the nodes (torchrun_launch, state=started): what would stop a
start, asked of every node before anything changes; the files a node lacks, sent to it; and
whether a started run's ranks run everywhere (detach). On the head itself, else over the cluster's
ssh (the head package's probe, sent through ssh_to_nodes)."""

from __future__ import annotations

import errno
import os
import random
import socket
import time

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.ssh_to_nodes import (
    nodes_without_ranks, probe_nodes, withdraw_from_board)
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.node_checks import interface_change
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.ports import port_holders, port_in_use
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.report import STOP_HINT, group_runs, runs_listed


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


def head_preflight(module, plan, run_dir, head):
    """Refuse what would stop the run on the head: a missing address, a taken rendezvous port
    (not under Slurm), a used run id."""
    if not holds_address(head.address):
        module.fail_json(msg=f"this machine does not have the head's address {head.address} "
                             f"({head.name}): run the launch on the head node (delegate_to: "
                             f"{head.name}) or fix its address", run_id=plan.run_id)
    # Under Slurm the job rendezvouses on its batch host once its nodes are free (a queued job of
    # another account may hold the port now): sbatch's own checks stand for this one.
    if module.params["scheduler"] != "slurm" and port_in_use(plan.request.master_port):
        holders = port_holders(plan.request.master_port)
        held = f" by {', '.join(holders)}" if holders else ""
        module.fail_json(msg=f"refusing to launch: the rendezvous port {plan.request.master_port} is already in "
                             f"use on the head {head.name}{held}; choose another port "
                             f"(-e master_port=N) or stop the process holding it",
                         port_holders=holders, run_id=plan.run_id)
    if os.path.lexists(run_dir):
        module.fail_json(msg=f"{run_dir} already exists: run id {plan.run_id} was used before; "
                             f"give a new run_id or leave it unset", run_id=plan.run_id)


def others_listed(others) -> str:
    """Other accounts' runs alive on nodes ([{node, run_id, account, started, world_size, state}]),
    one phrase per run, as a refusal names them."""
    runs: dict = {}
    for entry in others:
        runs.setdefault((entry["account"], entry["run_id"]), []).append(entry)
    return "; ".join(
        f"run {run_id} of account {account} ({found[0]['state']}, started {found[0].get('started', '?')}, "
        f"world size {found[0].get('world_size', '?')}) on {', '.join(entry['node'] for entry in found)}"
        for (account, run_id), found in sorted(runs.items()))


# Looks at the run board where only launches still starting are in the way (see preflight_nodes).
BOARD_LOOKS = 3


def preflight_nodes(module, plan, run_dir, expect: dict, control_dir=None, may_miss: int = 0,
                    entry: dict | None = None) -> tuple[dict, list]:
    """Everything the start would trip over, on every node, before anything changes: a node ssh
    cannot reach, a run alive anywhere (this account's, or another's on the run board), the head's
    address, port and run id. Returns the files that are missing or stale on each node ({path:
    SHA-1} `expect`), {name: [paths]}, and the nodes ssh cannot reach, of which up to `may_miss`
    (never the head) are left to the run to grow to later (min_nodes with max_restarts) rather
    than refused. The run's board `entry` is written on every node that answers (none in check
    mode), and named in `module.announced` for run_started to take back if nothing starts."""
    head = next(node for node in plan.nodes if node.name == plan.request.head)
    nodes = plan.nodes if plan.request.check_nodes else [head]
    ssh = module.get_bin_path("ssh", required=len(nodes) > 1)
    share = plan.request.shares_nodes
    request = {"expect": expect, "interfaces": len(nodes) > 1,
               "board": {"entry": None if module.check_mode else entry, "share": share}}
    if plan.request.expect_packages:
        request["packages"] = {"python": plan.request.python, "expect": plan.request.expect_packages}
    for look in range(BOARD_LOOKS):
        answers = probe_nodes(nodes, head.name, ssh, plan.request.python, {node.name: request for node in nodes},
                              control_dir=control_dir)
        in_the_way = [found for answer in answers.values() for found in answer.get("others") or []]
        # Only launches still starting in the way, and ours yielded to one on some node: two
        # launches at once may each have yielded on another node. Both withdraw, and look again
        # after a random while: the first back is the older everywhere, and the other yields.
        if share or not entry or module.check_mode or look == BOARD_LOOKS - 1 or not in_the_way \
                or any(found["state"] == "running" for found in in_the_way):
            break
        withdraw_from_board([node for node in nodes if answers[node.name].get("announced")], head.name, ssh,
                            plan.request.python, plan.run_id, control_dir)
        time.sleep(random.uniform(0.5, 3.0))
    order = [node.name for node in nodes]
    broken = [name for name in order if answers[name].get("failed_there")]
    if broken:  # ssh reached the node, and the probe itself failed there
        named = "; ".join(f"{name}: {answers[name]['error']}" for name in broken)
        module.fail_json(msg=f"refusing to launch: the launch's checks failed on {', '.join(broken)}, which ssh "
                             f"reached ({named}). Run torchfleet doctor, and report it if it persists",
                         run_id=plan.run_id)
    lost = [name for name in order if "error" in answers[name]]
    missed = lost if lost and len(lost) <= may_miss and head.name not in lost else []
    if lost and not missed:
        named = "; ".join(f"{name}: {answers[name]['error']}" for name in lost)
        module.fail_json(msg=f"refusing to launch: the head {head.name} cannot reach {', '.join(lost)} "
                             f"over ssh as the training account, as mpirun would ({named}). Bring the "
                             f"node back, or run setup.yml again if its address or host key changed",
                         unreachable=lost, run_id=plan.run_id)
    order = [name for name in order if name not in missed]
    module.announced = [name for name in order if answers[name].get("announced")]
    full = [f"{name}: {answers[name]['board_full']}" for name in order if answers[name].get("board_full")]
    if full:
        module.fail_json(msg=f"refusing to launch: {'; '.join(full)}", run_id=plan.run_id)
    skipped = [f"{name}: {'; '.join(answers[name]['board_skipped'])}" for name in order
               if answers[name].get("board_skipped")]
    if skipped:  # another account's files, never a reason to refuse: named, and passed by
        module.warn(f"run board entries not counted, as not their owners' or not entries: {' | '.join(skipped)}")
    runs = [{"node": name, **run} for name in order for run in group_runs(answers[name]["runs"])]
    if runs:
        module.fail_json(msg=f"refusing to launch: an earlier torchfleet run is still alive {runs_listed(runs)}. "
                             f"Stop it first with {STOP_HINT}, then launch again", runs=runs,
                         run_id=plan.run_id)
    others = [{"node": name, **entry} for name in order for entry in answers[name].get("others", [])]
    if others and not share:
        module.fail_json(msg=f"refusing to launch: another account's torchfleet run is alive on these nodes: "
                             f"{others_listed(others)}. Two runs on one set of nodes slow or starve each other "
                             f"(GPU memory, NCCL, the network): wait for it to end (torchfleet status shows it), "
                             f"or share the nodes on purpose with -e share_nodes=true (--share-nodes)",
                         others=others, run_id=plan.run_id)
    boardless = [name for name in order if answers[name].get("announced") is False]
    if boardless and entry and not module.check_mode:
        module.warn(f"no run board on {', '.join(boardless)} (set up by an older torchfleet): other accounts' "
                    f"launches cannot see this run there. Run setup.yml again to make it")
    by_name = {node.name: node for node in nodes}
    changed = [said for said in (interface_change(by_name[name], answers[name].get("interfaces")) for name in order)
               if said]
    if changed:
        module.fail_json(msg=f"refusing to launch: a node's cluster interface is no longer what setup "
                             f"recorded ({'; '.join(changed)}). mpirun, Gloo and NCCL would be told the old "
                             f"one, and the run would hang. Run setup again (ansible-playbook setup.yml -i "
                             f"INVENTORY) to record the interfaces as they are, then launch",
                         interface_changed=changed, run_id=plan.run_id)
    drifted = [name for name in order if answers[name].get("drift")]
    if drifted:
        listed = "; ".join(f"{name}: {', '.join(answers[name]['drift'])}" for name in drifted)
        module.fail_json(msg=f"refusing to launch: the Python environment {plan.request.python} is no longer "
                             f"what setup installed, on {listed}. Run setup again "
                             f"(ansible-playbook setup.yml -i INVENTORY) to put it back, then launch",
                         drifted={name: answers[name]["drift"] for name in drifted}, run_id=plan.run_id)
    head_preflight(module, plan, run_dir, head)
    return {name: answers[name]["stale"] for name in order if answers[name]["stale"]}, missed


def send_files(module, plan, files: dict, stale: dict, control_dir=None) -> None:
    """Put the stale files ({path: base64 content} `files`) on the nodes that lack them, whole,
    in parallel."""
    nodes = [node for node in plan.nodes if node.name in stale]
    requests = {node.name: {"write": {path: files[path] for path in stale[node.name]}}
                for node in nodes}
    ssh = module.get_bin_path("ssh", required=any(node.name != plan.request.head for node in nodes))
    answers = probe_nodes(nodes, plan.request.head, ssh, plan.request.python, requests, control_dir=control_dir)
    failed = [name for name, answer in answers.items() if "error" in answer]
    if failed:
        module.fail_json(msg="could not put the script's files on " + "; ".join(
            f"{name}: {answers[name]['error']}" for name in failed) + "; nothing was started",
            stale_files=stale, run_id=plan.run_id)


def ranks_started(module, plan, record, control_dir) -> bool:
    """Whether a process of the run (torchrun, or a rank), not only mpirun and the supervisor,
    runs on every node it can see (only the head where mpich nodes take no ssh)."""
    head = next(node for node in plan.nodes if node.name == plan.request.head)
    # A restarted run's attempt may use fewer nodes than it had: those its record names.
    nodes = [node for node in plan.nodes if node.name in (record.nodes or [node.name])]
    nodes = nodes if module.params["check_nodes"] else [head]
    return not nodes_without_ranks(nodes, plan.request.head, module.get_bin_path("ssh"), plan.request.python, plan.run_id,
                                   {record.supervisor_pid, record.launcher_pid}, control_dir=control_dir)
