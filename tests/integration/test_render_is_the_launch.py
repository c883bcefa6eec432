"""`torchfleet render --json` shows what the same launch runs: on the shared cluster, each case
is rendered with a run id, then launched with the same flags and run id, and the rendered argv
and hostfile are compared with those the run recorded (run.json, RUN_DIR/hostfile on the head).
Only what `render` says differs (dry_run.SUPERVISED) is taken out first.

Both take the head's tools from one function (_launch_resolution.resolved: the launch role's
filter launch_resolved, and render's call), and the nodes from one (launch_nodes).
MPICH's Hydra is compared in test_mpich_cluster.py, where it is installed.
"""

import json
import re
import uuid

import pytest

from ready_cluster import NODES, run
from test_run_lifecycle import LIMIT, RUNS, TICKER, torchfleet

pytestmark = pytest.mark.cluster
HEAD = NODES[0]
QUICK = ["--", "--ticks", "2", "--sleep", "0.1"]
SITE = re.compile(r"^export PYTHONPATH=\S+ TORCHFLEET_STACKS_DIR=\S+; ")


def without_what_differs(argv: list[str], supervised: bool) -> list[str]:
    """`argv` without what render says a supervised launch does otherwise (dry_run.SUPERVISED):
    mpirun's ssh through the launch's ssh masters (plm_rsh_args ControlPath), the ranks'
    sitecustomize.py on PYTHONPATH with the stacks' directory, and torchrun's --tee (which the
    launch leaves off where the head reads the workers' files)."""
    kept = []
    for word in argv:
        if supervised and kept[-1:] == ["plm_rsh_args"] and word.startswith("-o ControlPath="):
            kept[-2:] = []
            continue
        if supervised:
            word = SITE.sub("", word)
        else:
            word = word.replace(" --tee=3", "")
        kept.append(word)
    return kept


def assert_render_is_the_launch(cluster, *flags, env_ok=()):
    """Render then launch `flags` with one run id; the argv and hostfile must be the same."""
    run_id = f"tf-same-{uuid.uuid4().hex[:8]}"
    shown = torchfleet(cluster, "render", TICKER, "--json", "-e", f"run_id={run_id}", *flags, *QUICK)
    assert shown.returncode == 0, shown.stderr[-3000:]
    rendered = json.loads(shown.stdout)
    launched = torchfleet(cluster, "launch", TICKER, "-e", f"run_id={run_id}", *flags, *QUICK, timeout=LIMIT)
    assert launched.returncode == 0, launched.stdout[-2000:] + launched.stderr[-3000:]
    plan = json.loads(run(["docker", "exec", HEAD, "cat", f"{RUNS}/{run_id}/run.json"], timeout=60).stdout)
    hostfile = run(["docker", "exec", HEAD, "cat", f"{RUNS}/{run_id}/hostfile"], timeout=60).stdout
    print(f"{' '.join(flags)}:\n  rendered {rendered['argv']}\n  launched {plan['argv']}")
    assert without_what_differs(plan["argv"], True) == without_what_differs(rendered["argv"], False), (
        rendered["argv"], plan["argv"])
    assert hostfile == rendered["hostfile"], (hostfile, rendered["hostfile"])
    return rendered, plan


@pytest.mark.parametrize("flags", [
    pytest.param(("-e", "nproc_per_node=2"), id="torchrun"),
    pytest.param(("-e", "launch_mode=rank", "-e", "nproc_per_node=1"), id="rank"),
    pytest.param(("-e", "nproc_per_node=1", "--limit", f"{NODES[0]},{NODES[2]}"), id="limit"),
    pytest.param(("-e", "nproc_per_node=1", "-e", f"exclude={NODES[1]}"), id="exclude"),
    pytest.param(("-e", "nproc_per_node=1", "--max-restarts", "1", "--min-nodes", "2", "--hang-timeout", "120",
                  "-e", json.dumps({"env_set": {"TF_SAME": "1"}, "env_pass": ["LANG"],
                                    "torchrun_extra_args": ["--monitor-interval=1"],
                                    "mpirun_extra_args": ["--mca", "mpi_yield_when_idle", "1"]})),
                 id="restarts-env-extra-args"),
])
def test_render_shows_the_argv_and_hostfile_the_launch_runs(cluster, flags):
    assert_render_is_the_launch(cluster, *flags)


def test_render_shows_the_lighthouse_and_each_nodes_group_the_torchft_launch_runs(cluster):
    # fault_tolerance torchft: the command is the Lighthouse's, then each node's group, run by the
    # supervisor itself (no hostfile); the ticker never names torchft, so each group ticks alone.
    run_id = f"tf-same-{uuid.uuid4().hex[:8]}"
    flags = ("-e", "nproc_per_node=1", "--fault-tolerance", "torchft", "--min-nodes", "2")
    shown = torchfleet(cluster, "render", TICKER, "--json", "-e", f"run_id={run_id}", *flags, *QUICK)
    assert shown.returncode == 0, shown.stderr[-3000:]
    rendered = json.loads(shown.stdout)
    launched = torchfleet(cluster, "launch", TICKER, "-e", f"run_id={run_id}", *flags, *QUICK, timeout=LIMIT)
    assert launched.returncode == 0, launched.stdout[-2000:] + launched.stderr[-3000:]
    assert "never names torchft" in launched.stdout + launched.stderr
    plan = json.loads(run(["docker", "exec", HEAD, "cat", f"{RUNS}/{run_id}/run.json"], timeout=60).stdout)
    site = re.compile(r"export PYTHONPATH=\S+ TORCHFLEET_STACKS_DIR=\S+; ")
    assert site.sub("", plan["command"]) == rendered["command"].replace(" --tee=3", ""), (
        rendered["command"], plan["command"])
    lines = rendered["command"].splitlines()
    assert lines[0].split()[:3] == [lines[0].split()[0], "--min_replicas", "2"] and len(lines) == 4, lines
    assert [line.split()[0] for line in lines[1:]] == [f"[{node}]" for node in NODES], lines


@pytest.mark.parametrize("flags, words", [
    (("--max-restarts", "1", "--spare-nodes", "5"), "spare_nodes is 5, but the run has 3 node(s)"),
    (("-e", "bind_to=core"), "bind_to is core, but in torchrun mode"),
])
def test_what_the_launch_refuses_render_refuses_in_the_same_words(cluster, flags, words):
    shown = torchfleet(cluster, "render", TICKER, "-e", "nproc_per_node=1", *flags, *QUICK)
    launched = torchfleet(cluster, "launch", TICKER, "-e", "nproc_per_node=1", *flags, *QUICK, timeout=LIMIT)
    assert shown.returncode == 1 and words in shown.stderr, shown.stdout[-2000:] + shown.stderr[-2000:]
    assert launched.returncode == 125 and words in launched.stderr, launched.stderr[-3000:]
    said = shown.stderr.split("the launch would refuse this: ", 1)[1].strip()
    assert " ".join(said.split()) in " ".join(launched.stderr.split()), (said, launched.stderr[-3000:])
