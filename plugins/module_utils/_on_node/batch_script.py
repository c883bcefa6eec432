"""Batch scripts (Slurm, PBS) that run a launch plan from inside an allocation: the same mpirun +
torchrun command as an ssh launch, with the nodes, the rendezvous host and (for `torchfleet render`)
the run id taken from the scheduler when the job starts. One writer for `torchfleet render
--format slurm|pbs` and for the launch module's Slurm jobs."""

from __future__ import annotations

import dataclasses
import re
import shlex

from .launchers import launcher_of

FORMATS = ("slurm", "pbs")
MODULE_WRITER = "torchfleet.cluster.torchrun_launch"  # a run's own job, as its script says
# Placeholders in the plan, replaced by shell variables the script sets at run time.
HEAD = "tf-node0.placeholder"
RUN_ID = "tf-run-placeholder"
HOSTFILE = "/tf-hostfile-placeholder"
_SUBS = {HEAD: '"$head"', RUN_ID: '"$run_id"', HOSTFILE: '"$hostfile"'}
_SUB_RE = re.compile("|".join(re.escape(key) for key in _SUBS))
# Launcher options that take no value; every other option is followed by one (by two: --mca).
_FLAGS = frozenset({"--tag-output", "--allow-run-as-root", "--envall", "--oversubscribe", "--verbose"})


def for_allocation(plan, fmt: str, nodes: int, slots: int, run_id: str | None = None):
    """`plan` with the allocation's nodes as placeholders (`nodes` of them, `slots` each, the
    first the head) and its hostfile written by the script; the run id from the job unless given.
    Slurm starts mpirun's daemons itself (`plm slurm`): never ssh inside an allocation."""
    first = plan.nodes[0]  # a launch_plan.Node: its interface stands for every node's
    placeholders = tuple(dataclasses.replace(first, name=f"node{i}", slots=slots,
                                             address=HEAD if i == 0 else f"tf-node{i}.placeholder")
                         for i in range(nodes))
    extra = tuple(plan.request.mpirun_extra_args)
    if fmt == "slurm":
        extra += launcher_of(plan.request).slurm_args or ()
    request = plan.request.with_changes(head="node0", mpirun_extra_args=list(extra))
    return dataclasses.replace(plan, request=request, nodes=placeholders, hostfile_path=HOSTFILE,
                               run_id=run_id or RUN_ID, ssh_control_path=None)


def _word(word: str) -> str:
    """shlex-quote `word`, with placeholders as run-time shell variables."""
    parts, last = [], 0
    for match in _SUB_RE.finditer(word):
        if match.start() > last:
            parts.append(shlex.quote(word[last:match.start()]))
        parts.append(_SUBS[match.group()])
        last = match.end()
    if last < len(word) or not parts:
        parts.append(shlex.quote(word[last:]))
    return "".join(parts)


def command_lines(raw: list[str], words: list[str], shell: str) -> list[str]:
    """The launcher's words (`words`, quoted; `raw`, as rendered) grouped as a person writes a
    long command: the program, then each option with its value on a line, then the per-node
    shell with its script, then that script's arguments."""
    lines, i = [words[0]], 1
    while i < len(raw) and raw[i] != shell:
        take = 3 if raw[i] in ("--mca", "-mca", "--gmca") else 1
        if take == 1 and raw[i].startswith("-") and raw[i] not in _FLAGS and i + 1 < len(raw) \
                and raw[i + 1] != shell and not raw[i + 1].startswith("-"):
            take = 2
        lines.append(" ".join(words[i:i + take]))
        i += take
    if i < len(raw):
        lines += [" ".join(words[i:i + 3]), " ".join(words[i + 3:])]  # sh -c SCRIPT, then $0 ARGS
    return [line for line in lines if line]


def extra_args_problem(args, name: str) -> str | None:
    """Why a site's own scheduler options (`name`: slurm_extra_args, pbs_extra_args) cannot go
    into the script's header, one per line; None when they can."""
    if not isinstance(args, (list, tuple)):
        return f"{name} must be a list of options, one item each (['--qos=high', '--constraint=a100'])"
    for arg in args:
        if not isinstance(arg, str) or not arg.startswith("-") or any(ch in arg for ch in "\n\r\0"):
            return (f"{name} item {arg!r} is not one option: give each as '--option=value' on one line, "
                    f"starting with '-'")
    return None


def batch_script(fmt: str, plan, rendered, *, nodes: int, gpus_per_node: int | None,
                 walltime: str | None, queue: str | None, account: str | None,
                 job_name: str = "torchfleet", fixed_run_id: bool = False, writer: str = "",
                 whole_nodes: bool = True, extra_args=()) -> str:
    """A PBS or Slurm batch script that runs `rendered` (of a for_allocation plan) from the
    allocation's first node. `fixed_run_id`: the plan's run id as it is, else one from the job id.
    `whole_nodes`: every CPU and all memory of each node (a node's GPU workers and their data
    loaders share them), not the one CPU a site's cgroups would give one task; `extra_args`: the
    site's own options (qos, constraint, reservation), one header line each."""
    problem = extra_args_problem(list(extra_args), f"{fmt}_extra_args")
    if problem:
        raise ValueError(problem)
    q = shlex.quote
    if fmt == "pbs":
        select = f"select={nodes}:ncpus=1" + (f":ngpus={gpus_per_node}" if gpus_per_node else "")
        headers = [f"#PBS -N {job_name}", f"#PBS -l {select}",
                   "#PBS -l place=scatter:excl" if whole_nodes else "#PBS -l place=scatter"]
        headers += [f"#PBS -l walltime={walltime}"] if walltime else []
        headers += [f"#PBS -q {queue}"] if queue else []
        headers += [f"#PBS -A {account}"] if account else []
        headers += [f"#PBS {arg}" for arg in extra_args]
        list_nodes = 'awk \'NF && !seen[$1]++ {print $1}\' "${PBS_NODEFILE:?not inside a PBS job}"'
        job_id = "${PBS_JOBID:-$$}"
        cd = 'cd "${PBS_O_WORKDIR:-.}"'
    else:
        headers = [f"#SBATCH --job-name={job_name}", f"#SBATCH --nodes={nodes}",
                   "#SBATCH --ntasks-per-node=1"]
        headers += [f"#SBATCH --gpus-per-node={gpus_per_node}"] if gpus_per_node else []
        headers += [f"#SBATCH --time={walltime}"] if walltime else []
        headers += [f"#SBATCH --partition={queue}"] if queue else []
        headers += [f"#SBATCH --account={account}"] if account else []
        headers += ["#SBATCH --exclusive", "#SBATCH --mem=0"] if whole_nodes else []
        headers += [f"#SBATCH {arg}" for arg in extra_args]
        list_nodes = 'scontrol show hostnames "${SLURM_JOB_NODELIST:?not inside a Slurm job}"'
        job_id = "${SLURM_JOB_ID:-$$}"
        cd = ":"
    slots = plan.nodes[0].slots
    env = " ".join(f"{name}={_word(value)}" for name, value in rendered.env.items())
    argv = rendered.argv
    user_args = len(plan.request.script_args)
    words = [_word(w) for w in argv[:len(argv) - user_args]] + [q(w) for w in argv[len(argv) - user_args:]]
    shell = argv[len(argv) - user_args - 4]  # the tail is: SHELL -c SCRIPT $0 ARGS...
    command = " \\\n  ".join(command_lines(argv, words, shell))
    run_id = q(plan.run_id) if fixed_run_id else \
        f"$(printf 'tf-%s' \"{job_id}\" | tr -c 'A-Za-z0-9_.-' '_' | cut -c 1-64)"
    writer = writer or f"`torchfleet render --format {fmt}`"
    return f"""#!/bin/bash
{chr(10).join(headers)}
# Written by {writer}: one torchrun per node through mpirun, the
# rendezvous at the first node of the allocation.
set -euo pipefail
{cd}
nodes=$({list_nodes})
count=$(printf '%s\\n' "$nodes" | grep -c .)
if [ "$count" -ne {nodes} ]; then
  echo "torchfleet: this script was rendered for {nodes} nodes, the job has $count" >&2; exit 1
fi
head=${{nodes%%$'\\n'*}}  # not `| head -n 1`: under pipefail printf's SIGPIPE would end the job (141)
case "$head" in *[!A-Za-z0-9._:-]*) echo "torchfleet: odd node name: $head" >&2; exit 1;; esac
run_id={run_id}
hostfile=$(mktemp "${{TMPDIR:-/tmp}}/torchfleet-hostfile.XXXXXX")
trap 'rm -f "$hostfile"' EXIT
printf '%s slots={slots}\\n' $nodes > "$hostfile"
export {env}
{command}
"""
