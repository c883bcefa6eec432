"""`torchfleet render`: the launch plan from the inventory and cached facts, without a connection.

The argv, hostfile and environment come from the collection's one renderer (`_on_node/renderer.py`), fed
as the launch role feeds it; batch scripts (PBS, Slurm) run the same command shape inside an
allocation, taking the nodes from the scheduler at run time.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from torchfleet.collection import module_util
from torchfleet.extra_vars import RenderError
from torchfleet.inventory import cluster_group, head_name, read_facts


def as_bool(value) -> bool:
    return module_util("_launch_resolution").truthy(value)


def _as_int(value, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise RenderError(f"{what} must be a number, got {value!r}") from None


# --- the plan ----------------------------------------------------------------------------------

def build(script: str, script_args: list[str], extra: dict, hosts: list[str], hostvars: dict,
          cache_dir: Path, batch_nodes: int | None = None, batch_slots: int | None = None,
          batch_format: str = "slurm", group_hosts: list[str] | None = None):
    """(Plan, source) through the launch's own request and plan_for(); `source` is "facts" or "inventory".

    `hosts`: the group's that --limit leaves (`group_hosts`: all of the group's); the run's nodes
    are those that `exclude` does not name, and the launch role's checks run first, as a launch's.
    With batch_nodes the nodes are placeholders filled in at run time (see _on_node/batch_script.py)."""
    lp, lr = module_util("_on_node.launch_plan"), module_util("_launch_resolution")
    first = hostvars.get(hosts[0], {}) if hosts else {}
    head = head_name(hosts, hostvars, extra)
    if not batch_nodes:
        hosts = checked_nodes(script, extra, group_hosts or hosts, hosts, hostvars, head, cache_dir)
    # As launch.yml takes them: -e over the inventory's variables (a hostfile's slots among them).
    try:
        request = lr.from_variables({**(hostvars.get(head) or first), **extra})
    except lr.RequestError as error:
        raise RenderError(str(error)) from None
    nproc = request.pop("nproc_per_node", "auto")
    facts = {host: read_facts(cache_dir, host) or {} for host in hosts}
    ready = bool(hosts) and all(f and f.get("preflight_net") for f in facts.values())
    source = "facts" if ready else "inventory"
    head_facts = (facts.get(head or "") or {}) if ready else {}
    interface = extra.get("interface")

    nodes = []
    if batch_nodes:  # one node as the pattern of the allocation's (batch_script.for_allocation)
        slots = batch_slots or (nproc if nproc != "auto" else 1)
        if not interface:  # the cluster interface setup found, as the launch uses it
            interface = (head_facts.get("preflight_net") or {}).get("interface")
        if batch_nodes > 1 and not interface:
            raise RenderError("a batch script for several nodes needs their cluster network interface: "
                              "run `torchfleet setup` first (its facts name it), or give -e interface=NAME "
                              "(e.g. ib0 or eth0)")
        nodes.append(lp.Node(name="node0", address="node0", slots=slots, interface=interface))
        head = "node0"
    elif ready:  # as the launch role makes them (its filter launch_nodes)
        for host in hosts:
            _as_int(facts[host].get("preflight_gpu_count", 0), f"{host}: preflight_gpu_count")
        nodes = [lp.Node.of(node) for node in lr.launch_nodes(
            [{**facts[host], "inventory_hostname": host} for host in hosts], nproc)]
    else:  # the inventory alone: a command a person could run, not a launch's
        for host in hosts:
            hv = hostvars[host]
            gpus = _as_int(hv.get("nproc_per_node", 1), f"{host}: nproc_per_node")
            nodes.append(lp.Node(name=host, address=str(hv.get("ansible_host", host)), slots=lp.node_slots(gpus, nproc),
                                 interface=interface or hv.get("torchfleet_interface")))
    if not batch_nodes and len(nodes) > 1 and any(node.interface is None for node in nodes):
        raise RenderError("no facts cached for these nodes (run `torchfleet setup` first), and the "
                          "inventory does not name their cluster interface: give it with "
                          "-e interface=NAME (e.g. eth0)")
    # The home setup recorded (cluster_user's fact), else the role's own default: a path a shell
    # takes as it is when the command is pasted (a quoted ~user would not be expanded).
    user = request.get("user", "torchfleet")
    recorded = head_facts.get("cluster_user_account") or {}  # the account setup last made: maybe another
    home = ((recorded.get("home") if recorded.get("name") in (None, user) else None) or extra.get("cluster_user_home")
            or first.get("cluster_user_home") or ("/root" if user == "root" else f"/home/{user}"))
    workdir = request.get("workdir", f"{home}/torchfleet")
    run_id = request.get("run_id") or lp.new_run_id()
    log_dir = request.get("log_dir") or f"{workdir}/runs"
    # The launcher's environment is the head's, unseen from here: PATH is passed as a launch passes it.
    env_pass = request.get("env_pass", [])
    env_pass += [name for name in ("PATH",) if name not in env_pass]
    # What the launch takes from the head's facts, by the launch role's own function (its filter).
    resolved = lr.resolved(head_facts, mode=request.get("mode", "torchrun"), user=user, script=script,
                           shared_storage=request.get("shared_storage", False),
                           script_dir=request.get("script_dir") or f"{workdir}/scripts",
                           mpich_launcher=request.get("mpich_launcher"))
    # Without facts (the inventory alone), the plain names a launch could not use unchecked.
    resolved.update(python=resolved["python"] or "python3", torchrun=resolved["torchrun"] or "torchrun")
    request.update(resolved, head=head, script_args=list(script_args))
    plan = lp.plan_for(lr.LaunchRequest.of(request), nodes, run_id=run_id, run_dir=f"{log_dir}/{run_id}",
                       env_pass=env_pass, env_secrets=request.get("env_secrets", []),
                       env_set={str(k): str(v) for k, v in request.get("env_set", {}).items()})
    if batch_nodes:
        import dataclasses
        # Inside an allocation: output in the job's own file, the script where the job starts,
        # the environment's tools from the facts where setup cached them (else from PATH).
        plan = module_util("_on_node.batch_script").for_allocation(
            dataclasses.replace(plan, request=plan.request.with_changes(script=script, allow_run_as_root=False),
                                log_dir=None, node_log_dir=None),
            batch_format, batch_nodes, slots)
    return plan, source


def role_default(option):
    """The launch role's default of an option (defaults/main.yml), where it is a value and not a
    template (those render computes itself), else the option table's."""
    given = option.role_default
    if isinstance(given, (str, int, list, dict)) and "{{" not in str(given):
        return given
    return option.default


def checked_nodes(script: str, extra: dict, group_hosts: list[str], play_hosts: list[str], hostvars: dict,
                  head: str | None, cache_dir: Path) -> list[str]:
    """The run's nodes (the launch's _launch_checks.run_nodes), once the launch role's checks
    (_launch_checks.problems, as validate.yml calls them) find nothing: a refusal in the launch's
    own words. Render leaves out what only the controller's state at launch time decides (the
    script and files present, the secrets exported: render shows where they go)."""
    checks, options = module_util("_launch_checks"), module_util("_launch_options")
    given = {**(hostvars.get(head or "") or {}), **extra}
    variables = {}
    for option in options.OPTIONS:
        if option.name in options.CHECKED_OPTIONS and option.role_name:
            found = next((given[key] for key in (option.role_name, option.short) if key and key in given), None)
            variables[option.role_name] = role_default(option) if found is None else found
    variables.update(launch_script=script, launch_head=head, launch_group=cluster_group(extra),
                     launch_log_dir=given.get("launch_log_dir") or given.get("log_dir") or "~/torchfleet/runs")
    facts = {host: read_facts(cache_dir, host) or {} for host in group_hosts}
    request = {"variables": variables, "reserved_action": str(extra.get("action") or ""), "controller": False,
               "facts_pending": not all(facts[host].get("preflight_net") for host in play_hosts),
               "nodes": [{**facts[host], "inventory_hostname": host} for host in play_hosts],
               "group_hosts": group_hosts, "play_hosts": play_hosts}
    head_facts = facts.get(head or "") or {}
    request.update(head_torchrun=head_facts.get("python_env_torchrun", ""),
                   head_mpiexec=head_facts.get("mpich_mpiexec", ""), head_mpirun=head_facts.get("openmpi_mpirun", ""),
                   head_found_launcher=head_facts.get("mpich_found_launcher", ""))
    found = checks.problems(request)
    if found:
        raise RenderError("the launch would refuse this: " + " ".join(found))
    chosen = set(checks.run_nodes({**request, "exclude": variables.get("launch_exclude")}))
    return [host for host in play_hosts if host in chosen]


def render(plan):
    try:
        return module_util("_on_node.renderer").render(plan)
    except module_util("_on_node.launch_plan").PlanError as error:
        raise RenderError(str(error)) from None


def slurm_job(plan) -> tuple[list[str], str]:
    """(sbatch's argv, the batch script) that the same launch submits under Slurm, by the launch
    module's own writer (slurm_job.first_job), in the partition given (SLURM_DEFAULTS)."""
    try:
        argv, script, _options = module_util("_on_node.slurm_job").first_job(
            plan, plan.request.slurm_partition, "sbatch", os.path.dirname(plan.hostfile_path))
    except module_util("_on_node.launch_plan").PlanError as error:
        raise RenderError(str(error)) from None
    return argv, script


def as_json(plan, rendered, source: str) -> dict:
    shown = {"argv": rendered.argv, "command": rendered.command, "hostfile": rendered.hostfile,
             "nodes": list(rendered.nodes), "head": plan.request.head, "run_id": plan.run_id,
             "nproc_per_node": plan.request.nproc_per_node or plan.nodes[0].slots if plan.request.mode != "rank" else None,
             "world_size": rendered.world_size, "mode": plan.request.mode,
             "env": rendered.display_env, "per_node_env": rendered.per_node_env, "source": source}
    if plan.request.scheduler == "slurm":  # what runs is sbatch, and the job's script runs the launcher
        argv, script = slurm_job(plan)
        shown.update(argv=argv, command=shlex.join(argv), batch_script=script)
    return shown


# What the same launch through torchfleet runs beside this command (the renderer's input differs
# in these alone: launch_plan.plan_for's control_path, supervised and site_dir).
SUPERVISED = ("# torchfleet launch runs this command but for: its own run id (unless -e run_id=...), mpirun's ssh "
              "through the launch's ssh masters (ControlPath), torchrun's --tee left off where the head reads the "
              "workers' files, and the ranks' sitecustomize.py on PYTHONPATH (their stacks when the run hangs)")
# Under Slurm, beside those.
SLURM_DEFAULTS = ("# under Slurm: sbatch by the head's full path, and the partition Slurm names its default "
                  "where slurm_partition is not given (the launch asks Slurm on the head); a node left out by "
                  "--limit is excluded by its Slurm name")


def as_text(plan, rendered, source: str) -> str:
    """The launch as a script that runs as shown, pasted into a shell on the head as the training
    account: the hostfile written, the launcher's environment exported, then the command."""
    inherited, secret = list(rendered.inherit), list(rendered.secrets)
    directory = os.path.dirname(plan.hostfile_path)
    if plan.request.scheduler == "slurm":  # the job writes its hostfile and sets the launcher's environment
        argv, script = slurm_job(plan)
        return "\n".join([
            f"# On the head ({plan.request.head}), as the training account: the job's script, then its submission.",
            f"mkdir -p {shlex.quote(directory)}", f"cat > {shlex.quote(argv[-1])} <<'TORCHFLEET_JOB'",
            script.rstrip("\n"), "TORCHFLEET_JOB", SUPERVISED, SLURM_DEFAULTS, shlex.join(argv)]) + "\n"
    if rendered.groups:
        return torchft_text(plan, rendered)
    lines = [f"# On the head ({plan.request.head}), as the training account: the hostfile, the environment, the command.",
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
    lines.append(SUPERVISED)
    lines.append(rendered.command)
    return "\n".join(lines) + "\n"


def torchft_text(plan, rendered) -> str:
    """fault_tolerance torchft as a script for the head: the Lighthouse, then each node's replica
    group, its variables on its stdin (as the supervisor sends them), over ssh but on the head."""
    q = shlex.quote
    addresses = {node.name: node.address for node in plan.nodes}
    lines = [f"# On the head ({plan.request.head}), as the training account: torchft's Lighthouse, then each node's "
             f"replica group (its own torchrun), its variables on its stdin.", shlex.join(rendered.argv) + " &"]
    passed = [*rendered.inherit, *rendered.secrets]
    if passed:
        lines.append(f"# the supervisor adds to each group's stdin, as the launch has them: {', '.join(passed)}")
    for name, argv in rendered.groups.items():
        values = {**rendered.env, **rendered.per_node_env.get(name, {}), "TORCHFLEET_RESTART_COUNT": "0"}
        exports = " ".join(q(f"export {key}={q(value)}") for key, value in values.items())
        command = shlex.join(argv) if name == plan.request.head else shlex.join(
            ["ssh", "-o", "BatchMode=yes", addresses[name], shlex.join(argv)])
        lines.append(f"printf '%s\\n' {exports} | {command} &")
    lines += [SUPERVISED, "wait"]
    return "\n".join(lines) + "\n"
