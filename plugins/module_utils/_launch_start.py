"""Starting a run (torchrun_launch, state=started): the plan from the module's parameters, the
checks of every node, the files they lack, the run's directory on the head with the head package
in it, its supervisor, and following the run until its ranks run (detach) or it ends."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_lock, _on_node
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import stacks, supervisor
# Not used here: imported so that the module's zip, which carries what the module imports, holds
# the follower and its line server for the head package it installs (head_package_files).
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import follower  # noqa: F401 pylint: disable=unused-import
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.attempts import attempt_nodes, spares
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.ssh_to_nodes import close_ssh_masters, withdraw_from_board
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.node_files import files_to_place, write_file
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.processes import SUPERVISOR_VAR
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.report import STOP_HINT, now_iso
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.record import (
    ACTIVE,
    PLAN_FILE,
    RESULT,
    STATE_FILE,
    RunRecord,
    RunState,
    SupervisorPlan,
    index_run,
    read_state,
    runs_index,
)
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import (
    RESERVED_ENV,
    PlanError,
    new_run_id,
    plan_for,
)
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.renderer import render
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_probes import (
    preflight_nodes,
    ranks_started,
    send_files,
)
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_checks import module_refusal
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_resolution import LaunchRequest, head_reaches_nodes, stored
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_slurm import checked_job

# Always forwarded when set: the ranks need the launcher's programs, libraries and NCCL tuning.
AUTO_PASS = ("PATH", "LD_LIBRARY_PATH")
# What the launcher keeps of the module's environment. Ranks on the head inherit the launcher's
# whole environment while ranks elsewhere only get what is forwarded by name: keeping little
# makes the head's ranks see what the others see, and keeps Ansible's own variables out.
KEEP_ENV = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ",
                      "TMPDIR", "LD_LIBRARY_PATH", "SSH_AUTH_SOCK", "OPAL_PREFIX"})
KEEP_ENV_PREFIXES = ("LC_", "OMPI_MCA_", "PMIX_MCA_")

SITE_CONTENT = base64.b64encode(stacks.SITE.encode()).decode()


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


def _env_value(value):
    # YAML turns `OMP_NUM_THREADS: 4` into an int; anything else odd is left to the renderer,
    # which names it.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


def build(module, request, run_id, run_dir, control_dir=None):
    refusal = module_refusal(request)  # before anything changes: what the argument spec cannot say
    if refusal:
        module.fail_json(msg=refusal, run_id=run_id)
    env_set = {name: _env_value(value) for name, value in request.env_set.items()}
    secret_values = {name: _env_value(value) for name, value in request.env_secrets.items()}
    for name, value in secret_values.items():
        if not isinstance(value, str):
            module.fail_json(msg=f"env_secrets: {name} has no string value; give it one")
    taken = RESERVED_ENV | set(env_set) | set(secret_values)
    env_pass, missing = resolve_env_pass(request.env_pass, os.environ, taken)
    plan = plan_for(request, request.nodes, run_id=run_id, run_dir=run_dir, env_pass=env_pass,
                    env_secrets=secret_values, env_set=env_set,
                    control_path=f"{control_dir}/%C" if control_dir else None, supervised=True,
                    site_dir=stacks.site_dir(os.path.expanduser("~")))
    paths = {"run": run_dir, "launcher": os.path.join(run_dir, "launcher.log"),
             "ranks": plan.log_dir or "", "workers": plan.node_log_dir or "", "site": plan.site_dir}
    # The first attempt's world: every node but the spares, which the checks and files still reach.
    left = set(spares([node.name for node in plan.nodes], plan.request.head, request.spare_nodes))
    try:
        rendered = render(dataclasses.replace(plan, nodes=tuple(node for node in plan.nodes if node.name not in left)))
    except PlanError as err:
        module.fail_json(msg=str(err), run_id=run_id)
    if missing:
        module.fail_json(msg=f"env_pass names {', '.join(missing)}, but the module's environment "
                             f"on the head has no such variable: set it for the task "
                             f"(environment:) or remove it from env_pass", run_id=run_id)
    return plan, rendered, secret_values, paths


def ssh_masters(module, request):
    """A directory for the OpenSSH masters the probe leaves open to each node, which mpirun's ssh
    then rides instead of a handshake of its own per node (plm_rsh_args, see _on_node/renderer.py); None
    where mpirun does not ssh from the head to every node itself (mpich mode, tree spawn, Slurm,
    the head alone), in check mode, or when the user set Open MPI's rsh options, which ours would
    override. Short, in /tmp: a socket path has at most 107 bytes."""
    if module.check_mode or not head_reaches_nodes(request):
        return None
    if any("plm_rsh" in arg for arg in request.mpirun_extra_args) or any(
            name in os.environ for name in ("OMPI_MCA_plm_rsh_args", "OMPI_MCA_plm_rsh_agent")):
        return None
    try:
        return tempfile.mkdtemp(prefix="tf-ssh-", dir="/tmp")
    except OSError:
        return None


def run_started(module):
    request = LaunchRequest.of(module.params)  # the one request, from here to the supervisor
    control_dir = ssh_masters(module, request)
    module.supervised = False
    module.launch_lock = None
    module.announced = []
    module.plan = None
    try:
        start_run(module, request, control_dir)
    finally:
        # fail_json and exit_json end the module through SystemExit: this runs after them too.
        # Once the supervisor runs, mpirun's daemons ride the masters and the supervisor closes them.
        if module.announced and not module.supervised:  # it starts nothing
            plan = module.plan
            withdraw_from_board([node for node in plan.nodes if node.name in module.announced], plan.request.head,
                                module.get_bin_path("ssh"), plan.request.python, plan.run_id, control_dir)
        if control_dir and not module.supervised:
            # Not required=True: a missing ssh has failed the module already, with its own message.
            close_ssh_masters(module.get_bin_path("ssh"), control_dir,
                              [node["address"] for node in request.nodes or [] if node["name"] != request.head])


class _Interrupt:
    """Signals to the module itself: SIGTERM and SIGINT mean 'stop the run', SIGHUP 'stop
    watching it'. Recorded here, acted on by the wait loop."""
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


def head_package_files() -> dict:
    """{file name: bytes} of the head package as it is installed: its own files, the renderer and
    the batch script's writer among them (a restart renders the launch, or writes the Slurm job,
    again)."""
    return {name + ".py": _on_node.source(name).encode() for name in _on_node.FILES}


def install_head_package(home: str | None = None) -> str:
    """The head package of this version, installed once for the training account under
    ~/.local/share/torchfleet/head/DIGEST/_on_node (written whole elsewhere, then renamed into
    place, so a start beside this one never sees half of it); its path."""
    files = head_package_files()
    digest = hashlib.sha256(b"".join(name.encode() + b"\0" + files[name] for name in sorted(files))).hexdigest()[:16]
    root = os.path.join(home or os.path.expanduser("~"), ".local", "share", "torchfleet", "head")
    name = _on_node.__name__.rpartition(".")[2]
    package = os.path.join(root, digest, name)
    if os.path.isdir(package):
        return package
    os.makedirs(root, mode=0o700, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{digest}-", dir=root)
    try:
        for filename, content in files.items():
            write_file(os.path.join(staging, name, filename), content)
        os.chmod(staging, 0o755)
        os.rename(staging, os.path.join(root, digest))
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not os.path.isdir(package):  # not another start's install meanwhile
            raise
    return package


def prepare_run_dir(module, plan, rendered, run_dir, supervisor_plan, result):
    """The run's directory on the head: hostfile and the plan for the supervisor; and the head
    package it runs from, installed for this version. Returns the package's directory."""
    p = module.params
    try:
        os.makedirs(p["log_dir"], mode=0o750, exist_ok=True)
        os.mkdir(run_dir, 0o750)
        os.chmod(run_dir, 0o750)  # mkdir's mode is cut by the umask
        index_run(runs_index(), plan.run_id, run_dir)
        with open(os.open(plan.hostfile_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640),
                  "w") as handle:
            handle.write(rendered.hostfile)
        package = install_head_package()
        supervisor_plan = dataclasses.replace(supervisor_plan, package=package)
        write_file(os.path.join(run_dir, PLAN_FILE), supervisor_plan.to_json().encode())
    except OSError as err:
        module.fail_json(msg=f"cannot prepare the run directory {run_dir}: {err}", **result)
    return package


def read_record(run_dir):
    """The run's record as its supervisor last wrote it (RunRecord); None before the first."""
    found = read_state(run_dir)
    return RunRecord.from_dict(found) if found is not None else None


def start_supervisor(module, run_dir, package, env, result, restarted=False):
    """The supervisor, in a session of its own: no signal meant for the module or its caller
    reaches it, and it outlives them. Returns it once it has started the launcher (or ended);
    a run `restarted` by hand, once it has taken the run's record (its wait for the nodes may
    be long, and the module's signals must reach it meanwhile)."""
    try:
        proc = supervisor.start(sys.executable, package, run_dir,
                                dict(env, **{SUPERVISOR_VAR: result["run_id"]}))
    except OSError as err:
        module.fail_json(msg=f"cannot start the run's supervisor with {sys.executable}: {err}", **result)
    module.supervised = True
    while True:
        record = read_record(run_dir)
        if record and record.supervisor_pid == proc.pid and (restarted or record.state != RunState.STARTING.value):
            # Recorded: a launch after this one finds the run alive and says so.
            _launch_lock.release(module.launch_lock)
            return proc
        if proc.poll() is not None:
            with open(os.path.join(run_dir, "supervisor.log"), encoding="utf-8", errors="replace") as handle:
                said = handle.read()[-2000:]
            module.fail_json(msg=f"the run's supervisor exited with {proc.returncode} before starting "
                                 f"the launcher: {said}", **result)
        time.sleep(0.02)


def follow_run(module, plan, run_dir, supervisor_proc, control_dir) -> RunRecord:
    """Wait for the run: until its ranks run on every node (detach), or until it ends. The
    module's own SIGTERM or SIGINT stops the run; its caller gone (ansible-playbook killed, the
    connection lost, the terminal closed) leaves it running, owned by its supervisor."""
    watched = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    for signum in watched:
        signal.signal(signum, _Interrupt.handler)
    stopping = False
    while True:
        record = read_record(run_dir)
        if record.state not in ACTIVE:
            supervisor_proc.wait()
            return record
        if _Interrupt.signum in (signal.SIGTERM, signal.SIGINT) and not stopping:
            supervisor_proc.send_signal(signal.SIGTERM)
            stopping = True
        elif not stopping and (_Interrupt.signum == signal.SIGHUP or _caller_gone()):
            os._exit(0)  # nobody to report to; the supervisor carries on
        elif module.params["detach"] and not stopping:
            if module.params["detach_when"] == "submitted" or (record.job_id and record.job_state == "RUNNING"):
                return record
            if not record.job_id and ranks_started(module, plan, record, control_dir):
                # The ranks may have started after the record above was read: read it again, and
                # return once the supervisor has recorded them running.
                fresh = read_record(run_dir)
                if fresh.state not in (RunState.STARTING.value, RunState.RESTARTING.value):
                    return fresh
        if supervisor_proc.poll() is not None:
            time.sleep(0.1)  # it died before its last record, which its guardian writes
            continue
        try:  # the supervisor's end (its last record written) is seen at once, not at the next look
            supervisor_proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            pass


def torchft_unused(request, files: dict) -> str | None:
    """With fault_tolerance torchft, a warning where the script sent never names torchft: without
    its Manager each node trains alone, and a node back starts from its own step 0. `files`: the
    files sent, by absolute path (files_to_place)."""
    script = os.path.expanduser(request.script or "")
    content = files.get(script) if request.fault_tolerance == "torchft" else None
    try:
        text = base64.b64decode(content or "", validate=True)
    except ValueError:
        return None
    if content is None or b"torchft" in text:
        return None
    return (f"fault_tolerance=torchft, but {request.script} never names torchft: each node's group trains alone "
            f"unless the script uses torchft's Manager (examples/train_ft.py, docs/fault-tolerance.md)")


def start_run(module, request, control_dir):
    run_id = request.run_id or new_run_id()
    run_dir = os.path.join(request.log_dir, run_id)
    plan, rendered, secret_values, paths = build(module, request, run_id, run_dir, control_dir)
    module.plan = plan
    result = {
        "changed": False, "run_id": run_id, "argv": rendered.argv, "command": rendered.command,
        "hostfile": rendered.hostfile, "hostfile_path": plan.hostfile_path,
        "env": rendered.display_env, "per_node_env": rendered.per_node_env,
        "nodes": list(rendered.nodes), "world_size": rendered.world_size, "log_dir": run_dir,
        "launcher_log": paths["launcher"], "rank_logs_dir": paths["ranks"],
        "worker_logs_dir": paths["workers"], "state_file": os.path.join(run_dir, STATE_FILE),
    }
    # {absolute path: base64 content}: the probes hash the decoded bytes and write the text.
    try:
        # With the ranks' sitecustomize.py (stacks.SITE), on every node the launch reaches.
        files, digests = files_to_place({**request.file_contents, stacks.site_file(plan.site_dir): SITE_CONTENT})
    except ValueError as err:
        module.fail_json(msg=f"file_contents: {err}", run_id=run_id)
    said = torchft_unused(request, files)
    if said:
        module.warn(said)
    slurm = request.scheduler == "slurm"
    sbatch = script = script_path = batch = None
    if slurm:
        sbatch, script, script_path, batch = checked_job(module, plan, run_dir)
        result.update(argv=sbatch, command=shlex.join(sbatch), batch_script=script)
    if not module.check_mode:  # held until the supervisor has recorded the run (start_supervisor)
        try:
            module.launch_lock = _launch_lock.hold(run_id)
        except _launch_lock.LaunchLocked as held:
            module.fail_json(msg=f"refusing to launch: another launch is starting on this cluster ({held}), "
                                 f"and one launch at a time may start. Launch again once it has ended, or "
                                 f"stop it first with {STOP_HINT}", run_id=run_id)
        except OSError as err:
            module.fail_json(msg=f"cannot take the launch lock {_launch_lock.lock_path()} on the head: {err}",
                             run_id=run_id)
    # With restarts and min_nodes, a node that does not answer is left out: the run starts on the
    # others and grows to it once it answers (the supervisor's watch_left_out).
    world = list(rendered.nodes)
    size = len(world)
    may_miss = len(world) - request.min_nodes if request.min_nodes and request.max_restarts and not slurm else 0
    entry = {"run_id": run_id, "head": plan.request.head, "nodes": list(rendered.nodes), "world_size": rendered.world_size,
             "started": now_iso()}
    stale, missed = preflight_nodes(module, plan, run_dir, digests, control_dir, may_miss=may_miss, entry=entry)
    if missed:
        reachable = [node.name for node in plan.nodes if node.name not in missed]
        world = attempt_nodes(reachable, world, size)
        try:
            rendered = render(dataclasses.replace(plan, nodes=tuple(node for node in plan.nodes if node.name in world)))
        except PlanError as err:
            module.fail_json(msg=str(err), run_id=run_id)
        result.update(argv=rendered.argv, command=rendered.command, hostfile=rendered.hostfile,
                      nodes=list(rendered.nodes), world_size=rendered.world_size, left_out=missed)
        module.warn(f"{', '.join(missed)} did not answer: run {run_id} starts on {', '.join(rendered.nodes)} "
                    f"(min_nodes {request.min_nodes}) and grows to them once they answer, at a checkpoint")
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
    by_name = {node.name: node for node in plan.nodes}
    supervisor_plan = SupervisorPlan(
        run_id=run_id, request=stored(request), argv=sbatch or rendered.argv, cwd=request.chdir,
        command=result["command"], nodes=[vars(by_name[name]) for name in rendered.nodes],
        nproc=plan.request.nproc_per_node or by_name[plan.request.head].slots, world_size=rendered.world_size,
        ssh=module.get_bin_path("ssh") if len(plan.nodes) > 1 else None, control_dir=control_dir,
        paths=paths, sbatch=sbatch, worker_files=not plan.tee_workers,
        fewest_nodes=request.min_nodes or len(rendered.nodes), world_nodes=size,
        env_pass=list(plan.env_pass), env_set=dict(plan.env_set),
        node_checks={"expect": digests, "packages": {"python": plan.request.python, "expect": request.expect_packages}
                     if request.expect_packages else None},
        batch=batch, node_dirs=True,
    )
    if _caller_gone():
        # Interrupted before the run started (Ctrl-C of torchfleet launch, whose stop waits for
        # this lock): start nothing. Nobody reads a result; exiting lets the lock go, and through
        # SystemExit run_started closes the ssh masters (os._exit left them for their 60 s).
        raise SystemExit(1)
    package = prepare_run_dir(module, plan, rendered, run_dir, supervisor_plan, result)
    if slurm:
        try:
            write_file(str(script_path), str(script).encode())  # checked_job's, set for Slurm
        except OSError as err:
            module.fail_json(msg=f"cannot write the batch script {script_path}: {err}", **result)
    result["changed"] = True
    supervisor_proc = start_supervisor(module, run_dir, package, env, result)
    record = follow_run(module, plan, run_dir, supervisor_proc, control_dir)
    for warning in record.warnings or []:
        module.warn(warning)
    # Not a null rc while the run goes on: Ansible fails a task whose result has an rc other than 0.
    shown = {key: getattr(record, key) for key in RunRecord.keys(RESULT)}
    result.update({key: value for key, value in shown.items() if value is not None})
    if record.state in ACTIVE:  # detached: the run goes on
        module.exit_json(**result)
    msg = result.pop("msg")
    if _Interrupt.signum is not None:
        msg = f"the module was interrupted by {signal.Signals(_Interrupt.signum).name}; {msg}"
    if record.state != "succeeded":
        module.fail_json(msg=msg, **result)
    module.exit_json(**result)
