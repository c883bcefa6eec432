"""`torchfleet render`: the launch plan from the inventory and cached facts, without a connection.

The argv, hostfile and environment come from the collection's one renderer (`_launch_plan`), fed
as the launch role feeds it; batch scripts (PBS, Slurm) run the same command shape inside an
allocation, taking the nodes from the scheduler at run time.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import yaml

from torchfleet.collection import module_util


class RenderError(Exception):
    """A problem the user can act on."""


# --- extra vars, as ansible-playbook reads them --------------------------------------------------

def parse_extra_vars(values: list[str]) -> dict:
    """-e KEY=VALUE (several per -e), -e JSON/YAML mapping, -e @FILE; later ones win."""
    result: dict = {}
    for value in values:
        if value.startswith("@"):
            if not Path(value[1:]).expanduser().is_file():
                raise RenderError(f"-e {value}: no such file; give the path of a YAML or JSON file of "
                                  f"variables after the @")
            try:
                data = yaml.safe_load(Path(value[1:]).expanduser().read_text())
            except (OSError, yaml.YAMLError) as error:
                raise RenderError(f"-e {value}: cannot read it: {error}") from None
        elif value.lstrip().startswith(("{", "[")):
            try:
                data = yaml.safe_load(value)
            except yaml.YAMLError as error:
                raise RenderError(f"-e {value!r} is not valid JSON/YAML: {error}") from None
        else:
            data = {}
            for word in shlex.split(value):
                key, sep, val = word.partition("=")
                if not sep or not key:
                    raise RenderError(f"-e {value!r}: expected KEY=VALUE, JSON or @FILE")
                data[key] = val
        if data is None:
            continue
        if not isinstance(data, dict):
            raise RenderError(f"-e {value!r} must give a mapping of variables")
        result.update(data)
    return result


# --- inventory and facts -----------------------------------------------------------------------

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
    """A host's facts from the jsonfile cache (`s1_HOST` of ansible-core 2.19, or plain `HOST`)."""
    for name in (f"s1_{host}", host):
        path = Path(cache_dir) / name
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and "__payload__" in data:
            data = json.loads(data["__payload__"])
        return _untag(data) if isinstance(data, dict) else None
    return None


def _as_list(value, what: str) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, list):
        return [str(item) for item in value]
    raise RenderError(f"{what} must be a list, got {value!r}")


def as_bool(value) -> bool:
    return str(value).lower() in ("true", "yes", "1", "on")


def _as_int(value, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise RenderError(f"{what} must be a number, got {value!r}") from None


# --- the plan ----------------------------------------------------------------------------------

def build(script: str, script_args: list[str], extra: dict, hosts: list[str], hostvars: dict,
          cache_dir: Path, batch_nodes: int | None = None, batch_slots: int | None = None,
          batch_format: str = "slurm"):
    """(Plan, source) as the launch role would build it; `source` is "facts" or "inventory".

    With batch_nodes the nodes are placeholders filled in at run time (see _batch_script)."""
    lp = module_util("_launch_plan")
    first = hostvars.get(hosts[0], {}) if hosts else {}
    head = first.get("torchfleet_head") or (hosts[0] if hosts else None)
    user = first.get("cluster_user_name", "torchfleet")
    # As the launch role reads it: -e first, then the inventory's (a hostfile's slots), then auto.
    nproc = str(extra.get("nproc_per_node", (hostvars.get(head) or first).get("nproc_per_node", "auto")))
    if nproc != "auto":
        nproc = _as_int(nproc, "nproc_per_node")
    facts = {host: read_facts(cache_dir, host) for host in hosts}
    ready = bool(hosts) and all(f and f.get("preflight_net") for f in facts.values())
    source = "facts" if ready else "inventory"
    head_facts = (facts.get(head) or {}) if ready else {}
    interface = extra.get("interface")

    nodes = []
    if batch_nodes:  # one node as the pattern of the allocation's (_batch_script.for_allocation)
        slots = batch_slots or (nproc if nproc != "auto" else 1)
        if not interface:  # the cluster interface setup found, as the launch uses it
            interface = (head_facts.get("preflight_net") or {}).get("interface")
        if batch_nodes > 1 and not interface:
            raise RenderError("a batch script for several nodes needs their cluster network interface: "
                              "run `torchfleet setup` first (its facts name it), or give -e interface=NAME "
                              "(e.g. ib0 or eth0)")
        nodes.append(lp.Node(name="node0", address="node0", slots=slots, interface=interface))
        head = "node0"
    else:
        for host in hosts:
            hv, fact = hostvars[host], facts[host]
            if ready:
                net = fact["preflight_net"]
                gpus = _as_int(fact.get("preflight_gpu_count", 0), "preflight_gpu_count")
                address, iface = net["address"], net.get("interface")
            else:
                gpus = _as_int(hv.get("nproc_per_node", 1), f"{host}: nproc_per_node")
                address = hv.get("ansible_host", host)
                iface = interface or hv.get("torchfleet_interface")
            nodes.append(lp.Node(name=host, address=str(address), slots=lp.node_slots(gpus, nproc),
                                 interface=iface))
    if not batch_nodes and len(nodes) > 1 and any(node.interface is None for node in nodes):
        raise RenderError("no facts cached for these nodes (run `torchfleet setup` first), and the "
                          "inventory does not name their cluster interface: give it with "
                          "-e interface=NAME (e.g. eth0)")
    # The home setup recorded (cluster_user's fact), else the role's own default: a path a shell
    # takes as it is when the command is pasted (a quoted ~user would not be expanded).
    home = ((head_facts.get("cluster_user_account") or {}).get("home") or extra.get("cluster_user_home")
            or first.get("cluster_user_home") or ("/root" if user == "root" else f"/home/{user}"))
    workdir = str(extra.get("cluster_user_workdir", f"{home}/torchfleet"))
    run_id = str(extra.get("run_id") or lp.new_run_id(datetime.now(timezone.utc), secrets.token_hex(3)))
    shared = as_bool(extra.get("shared_storage", False))
    log_dir = str(extra.get("log_dir", f"{workdir}/runs"))
    run_dir = f"{log_dir}/{run_id}"
    mode = str(extra.get("launch_mode", "torchrun"))
    ranks, workers = lp.run_log_dirs(run_dir, mode)
    env_pass = _as_list(extra.get("env_pass"), "env_pass")
    env_pass += [name for name in ("PATH",) if name not in env_pass]
    env_set = extra.get("env_set") or {}
    if not isinstance(env_set, dict):
        raise RenderError(f"env_set must be a mapping, got {env_set!r}")
    plan = lp.Plan(
        nodes=tuple(nodes), head=head, run_id=run_id,
        script=script if shared else f"{workdir}/scripts/{os.path.basename(script)}",
        hostfile_path=f"{run_dir}/hostfile", script_args=tuple(script_args), mode=mode,
        port=_as_int(extra.get("master_port", 29500), "master_port"),
        python=head_facts.get("python_env_python", "python3"),
        torchrun=head_facts.get("python_env_torchrun", "torchrun"),
        # The full paths setup recorded, as the launch role passes them; mpich mode's flavour from
        # -e mpich_launcher, else from what setup read of mpiexec.
        launcher=head_facts.get("mpich_mpiexec" if mode == "mpich" else "openmpi_mpirun"),
        mpich_launcher=(str(extra.get("mpich_launcher") or head_facts.get("mpich_found_launcher") or "")
                        or None) if mode == "mpich" else None,
        log_dir=ranks, node_log_dir=workers,
        env_pass=tuple(env_pass), env_secrets=tuple(_as_list(extra.get("env_secrets"), "env_secrets")),
        env_set={str(k): str(v) for k, v in env_set.items()},
        mpirun_extra_args=tuple(_as_list(extra.get("mpirun_extra_args"), "mpirun_extra_args")),
        allow_run_as_root=user == "root" and mode != "mpich", tree_spawn=as_bool(extra.get("tree_spawn", False)),
        # Unset, the renderer's default, which is the role's.
        silent_node_timeout=_as_int(extra.get("launch_silent_node_timeout", lp.Plan.silent_node_timeout),
                                    "launch_silent_node_timeout"),
    )
    if batch_nodes:
        import dataclasses
        # Inside an allocation: output in the job's own file, the script where the job starts,
        # the environment's tools from the facts where setup cached them (else from PATH).
        plan = module_util("_batch_script").for_allocation(
            dataclasses.replace(plan, script=script, log_dir=None, node_log_dir=None,
                                allow_run_as_root=False),
            batch_format, batch_nodes, slots)
    return plan, source


def render(plan):
    lp = module_util("_launch_plan")
    try:
        return lp.render(plan)
    except lp.PlanError as error:
        raise RenderError(str(error)) from None


def as_json(plan, rendered, source: str) -> dict:
    return {"argv": rendered.argv, "command": rendered.command, "hostfile": rendered.hostfile,
            "nodes": list(rendered.nodes), "head": plan.head, "run_id": plan.run_id,
            "nproc_per_node": plan.nproc_per_node or plan.nodes[0].slots if plan.mode != "rank" else None,
            "world_size": rendered.world_size, "mode": plan.mode,
            "env": rendered.display_env, "per_node_env": rendered.per_node_env, "source": source}


def as_text(plan, rendered, source: str) -> str:
    """The launch as a script that runs as shown, pasted into a shell on the head as the training
    account: the hostfile written, the launcher's environment exported, then the command."""
    inherited, secret = list(rendered.inherit), list(rendered.secrets)
    directory = os.path.dirname(plan.hostfile_path)
    lines = [f"# On the head ({plan.head}), as the training account: the hostfile, the environment, the command.",
             f"mkdir -p {shlex.quote(directory)}",
             f"cat > {shlex.quote(plan.hostfile_path)} <<'EOF'", rendered.hostfile.rstrip("\n"), "EOF"]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in rendered.env.items()]
    if inherited:
        lines.append(f"# passed on as this shell has them: {', '.join(inherited)}")
    if secret:
        lines.append(f"# secrets, read from the controller's environment by a launch: export {', '.join(secret)} "
                     f"here first")
    for node, values in rendered.per_node_env.items():
        lines += [f"# on {node}: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in values.items())]
    lines.append(rendered.command)
    return "\n".join(lines) + "\n"
