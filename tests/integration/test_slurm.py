"""Runs through a real Slurm (Debian's slurm-wlm 22.05: munge, slurmctld on the head, slurmd on
every node), on the session's shared cluster: `torchfleet launch --scheduler slurm` as a run like
any other (record, logs -f, wait, runs, stop = scancel), a failing rank named, mpirun's daemons
started by Slurm and not ssh; examples/train_fsdp.py saving a sharded checkpoint in one job and
resuming it in another; the scripts of `torchfleet render --format slurm` submitted by hand with
`sbatch --wait`, and the PBS script's body run as PBS runs it. Every test leaves no job queued and
no process of a run on any node."""

import contextlib
import json
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from ready_cluster import NODES, REPO, recap, run, training_result
from test_run_lifecycle import (
    ENDLESS, FLOOD, LIMIT, RUNS, SHORT, TICKER, TRAINING, Attached, _every_ranks_lines_once_whole_in_order, left_on,
    runs_json, torchfleet, wait_until)

pytestmark = pytest.mark.cluster
HEAD = NODES[0]
JOBS = "/home/torchfleet/slurm-jobs"  # where the hand-submitted scripts live, on every node


def on(node, *argv, user=None, timeout=120):
    return run(["docker", "exec", *(["-u", user] if user else []), node, *argv], timeout=timeout)


def queue():
    return on(HEAD, "squeue", "-h", "-o", "%i %j %T").stdout.strip()


@pytest.fixture(autouse=True)
def nothing_left(cluster):
    yield
    try:
        wait_until(lambda: not queue() and not any(left_on(node) for node in NODES), 30,
                   "no job queued and nothing of a run left")
    except AssertionError:
        torchfleet(cluster, "stop")
        on(HEAD, "scancel", "-u", "torchfleet")
        raise


def test_setup_sets_slurm_up_from_the_inventory_once_and_a_second_run_changes_nothing(cluster):
    # The session's setup (-e scheduler=slurm) configured Slurm on nodes whose image has its
    # packages and no configuration: every node idle, with the CPUs and memory slurmd found.
    nodes = on(HEAD, "sinfo", "-h", "-N", "-o", "%N %t %c %m").stdout.split("\n")
    rows = [line.split() for line in nodes if line.strip()]
    cpus = on(HEAD, "nproc").stdout.strip()
    assert [(row[0], row[1], row[2]) for row in rows] == [(f"node{i}", "idle", cpus) for i in range(3)], rows
    assert all(int(row[3]) > 0 for row in rows), rows
    keys = {on(node, "sha256sum", "/etc/munge/munge.key").stdout.split()[0] for node in NODES}
    assert len(keys) == 1, keys  # one key, the same everywhere
    key = on(HEAD, "cat", "/etc/munge/munge.key").stdout
    assert key.startswith("torchfleet-munge-key ")
    rc, output = cluster.setup("-e", "scheduler=slurm", "-v")
    assert rc == 0, output[-3000:]
    assert all(counts["changed"] == 0 for counts in recap(output).values()), output[-3000:]
    assert key.split()[1] not in output  # never printed, even with -v
    facts = "".join(path.read_text() for path in Path(cluster.env["ANSIBLE_CACHE_PLUGIN_CONNECTION"]).iterdir())
    assert key.split()[1] not in facts  # nor in the controller's fact cache
    assert "slurm_installed" in facts


def test_a_run_through_slurm_trains_on_every_node_and_is_a_run(cluster):
    started = time.monotonic()
    launched = torchfleet(cluster, "launch", "--scheduler", "slurm", "examples/train.py", "-e", "nproc_per_node=2",
                          "--", *TRAINING)
    assert launched.returncode == 0, launched.stdout[-2000:] + launched.stderr[-3000:]
    lines = launched.stdout.splitlines()
    assert any(line.startswith("epoch 1/4") for line in lines), lines  # rank 0's output, streamed
    result = json.loads(next(line for line in lines if line.startswith("TORCHFLEET_RESULT ")).split(" ", 1)[1])
    assert result["world_size"] == 6  # 3 nodes x 2 workers
    run_id = lines[-1].split()[1].rstrip(":")
    assert lines[-1].startswith(f"run {run_id}: rc 0, world size 6, ") and ", succeeded, " in lines[-1]
    job = re.search(r"Slurm job (\d+)", launched.stderr)
    assert job, launched.stderr
    record = runs_json(cluster)[run_id]
    assert (record["state"], record["scheduler"], record["job_id"]) == ("succeeded", "slurm", job.group(1))
    assert record["nodes"] == NODES and record["batch_host"] == "node0"
    print(f"torchfleet launch --scheduler slurm: {time.monotonic() - started:.1f} s to the end")
    # Every rank's own log, per node, as for an ssh launch.
    every = torchfleet(cluster, "logs", run_id, "--all-ranks")
    for node in NODES:
        assert f" {node}] TORCHFLEET_RANK rank=" in every.stdout, every.stdout[-3000:]


def test_every_line_of_every_rank_arrives_once_and_whole_from_a_slurm_job(cluster, tmp_path):
    # As for an ssh launch: the ranks' own files on each node, read over the cluster's ssh, not
    # torchrun's --tee copies in the job's output (which lose and glue lines at this rate).
    script = tmp_path / "flood.py"
    script.write_text(FLOOD)
    detached = torchfleet(cluster, "launch", "--scheduler", "slurm", "--detach", str(script), "-e", "nproc_per_node=2")
    assert detached.returncode == 0, detached.stderr[-3000:]
    run_id = detached.stdout.split()[1]
    followed = torchfleet(cluster, "logs", "-f", run_id, "--all-ranks")
    assert followed.returncode == 0, followed.stderr[-3000:]
    assert _every_ranks_lines_once_whole_in_order(followed.stdout) == 120_000
    afterwards = torchfleet(cluster, "logs", run_id, "--all-ranks")
    assert _every_ranks_lines_once_whole_in_order(afterwards.stdout) == 120_000
    launcher = on(HEAD, "grep", "-c", "FLOOD", f"{RUNS}/{run_id}/launcher.log")
    assert launcher.stdout.strip() == "0", launcher.stdout  # stored once: not in the job's output
    assert runs_json(cluster)[run_id]["state"] == "succeeded"


def test_a_failing_rank_under_slurm_is_named_with_its_node_and_code(cluster):
    launched = torchfleet(cluster, "launch", "--scheduler", "slurm", TICKER, "-e", "nproc_per_node=1",
                          "--", *SHORT, "--fail-on-rank", "2")
    assert launched.returncode == 3, launched.stdout[-2000:] + launched.stderr[-3000:]
    said = " ".join(launched.stderr.split())
    assert f"rank 2 on {NODES[2]} exited with code 3 first" in said, said
    assert "TICKER_FAIL rank=2" in said
    run_id = launched.stdout.splitlines()[-1].split()[1].rstrip(":")
    record = runs_json(cluster)[run_id]
    assert (record["state"], record["failed_rank"], record["failed_host"]) == ("failed", 2, NODES[2])


def test_a_job_past_its_time_limit_is_timed_out_as_slurm_says_and_wait_exits_124(cluster):
    # Slurm ends the job at its one-minute limit (JobState=TIMEOUT, whatever its ExitCode says).
    launched = torchfleet(cluster, "launch", "--scheduler", "slurm", "--detach", TICKER, "-e", "nproc_per_node=1",
                          "-e", "slurm_time_limit=1", "--", *ENDLESS)
    assert launched.returncode == 0, launched.stderr[-3000:]
    run_id = launched.stdout.split()[1]
    waited = torchfleet(cluster, "wait", run_id)
    said = " ".join(waited.stderr.split())
    assert waited.returncode == 124, (waited.stdout[-1000:], said[-2000:])
    assert re.search(r"Slurm ended job \d+: TIMEOUT( \(\w+\))?: it reached its time limit", said), said
    assert "without naming a failed rank" not in said, said
    record = runs_json(cluster)[run_id]
    assert (record["state"], record["rc"]) == ("timed_out", 124), record


def test_fsdp_under_slurm_saves_a_sharded_checkpoint_and_resumes_on_fewer_ranks(cluster):
    """examples/train_fsdp.py as a Slurm job: six FSDP ranks save a sharded checkpoint on the
    nodes' shared storage, and a second job of three ranks resumes from it."""
    checkpoint = f"/shared/fsdp-slurm-{time.monotonic_ns()}"

    def job(nproc, *args):
        launched = torchfleet(cluster, "launch", "--scheduler", "slurm", "examples/train_fsdp.py",
                              "-e", f"nproc_per_node={nproc}", "--", "--checkpoint-dir", checkpoint, *args)
        assert launched.returncode == 0, launched.stdout[-2000:] + launched.stderr[-3000:]
        return training_result(launched.stdout)

    try:
        first = job(2, "--epochs", "2")
        assert first["world_size"] == 6 and first["strategy"] == "fsdp", first
        assert first["losses"][1] < first["losses"][0], first
        shards = on(NODES[2], "sh", "-c", f"ls {checkpoint}/$(cat {checkpoint}/latest)").stdout
        assert len(re.findall(r"__\d+_0\.distcp", shards)) == 6, shards  # one file per rank
        resumed = job(1, "--epochs", "3", "--resume")
        assert (resumed["world_size"], resumed["saved_world_size"], resumed["resumed_from_epoch"]) == (3, 6, 2)
        assert resumed["losses"][:2] == first["losses"] and len(resumed["losses"]) == 3, resumed
    finally:
        on(HEAD, "rm", "-rf", checkpoint)


def test_detach_then_stop_cancels_the_job_and_leaves_nothing(cluster):
    detached = torchfleet(cluster, "launch", "--scheduler", "slurm", "--detach", TICKER,
                          "-e", "nproc_per_node=1", "--", *ENDLESS)
    assert detached.returncode == 0, detached.stderr[-3000:]
    run_id = detached.stdout.split()[1]
    record = runs_json(cluster)[run_id]
    assert record["state"] == "running" and record["job_state"] == "RUNNING", record
    assert queue() == f"{record['job_id']} {run_id} RUNNING"
    # Inside the allocation mpirun's daemons are Slurm's job steps (slurmstepd), never ssh's.
    for node in NODES[1:]:
        def orted_pids():
            return on(node, "pgrep", "-u", "torchfleet", "-x", "orted").stdout.split()
        orted = wait_until(orted_pids, 60, f"Open MPI's daemon on {node}")
        parent = on(node, "ps", "-o", "ppid=", "-p", orted[0]).stdout.strip()
        assert on(node, "ps", "-o", "comm=", "-p", parent).stdout.strip() == "slurmstepd"
    wait_until(lambda: "tick 1/" in torchfleet(cluster, "logs", run_id).stdout, LIMIT, "the first tick")

    stopped = torchfleet(cluster, "stop", run_id)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert not queue()
    assert not any(left_on(node) for node in NODES), {node: left_on(node) for node in NODES}
    record = runs_json(cluster)[run_id]
    assert record["state"] == "stopped" and record["job_state"] == "CANCELLED", record
    waited = torchfleet(cluster, "wait", run_id)
    assert waited.returncode != 0 and ", stopped, " in waited.stdout, waited.stdout + waited.stderr


@contextlib.contextmanager
def every_node_taken():
    """A job of someone else's holding every node: the next job stays PENDING until it ends."""
    blocker = on(HEAD, "sbatch", "--parsable", "--exclusive", "-N", "3", "--job-name", "tf-blocker",
                 "--wrap", "sleep 600")
    assert blocker.returncode == 0, blocker.stderr
    try:
        wait_until(lambda: "tf-blocker RUNNING" in queue(), 60, "the blocking job running")
        yield
    finally:
        on(HEAD, "scancel", blocker.stdout.strip())


def test_a_job_that_never_starts_says_why_and_gives_up_at_the_timeout(cluster):
    with every_node_taken():
        launched = torchfleet(cluster, "launch", "--scheduler", "slurm", TICKER, "-e", "nproc_per_node=1",
                              "-e", "launch_timeout=15", "--", *SHORT)
    said = " ".join(launched.stderr.split())
    assert launched.returncode != 0, launched.stdout + launched.stderr
    assert re.search(r"is Slurm job \d+: PENDING \((Resources|Priority|Nodes\w*)\)", said), said
    assert "never started within launch_timeout (15 s): it stayed PENDING" in said and "was cancelled" in said, said
    run_id = launched.stdout.splitlines()[-1].split()[1].rstrip(":")
    assert runs_json(cluster)[run_id]["state"] == "timed_out"


def test_stop_cancels_a_pending_job_whose_supervisor_is_gone(cluster):
    # The job carries its run id as its name and torchfleet's comment: `stop` finds it with no
    # supervisor (nor its guardian) left to ask.
    with every_node_taken():
        launch = Attached(cluster, "--scheduler", "slurm", TICKER, "-e", "nproc_per_node=1",
                          "--", *SHORT)
        try:
            said = wait_until(lambda: next((line for line in launch.errors if "submitted as Slurm job" in line),
                                           None), LIMIT, "the run submitted")
            run_id = said.split()[2]
            wait_until(lambda: f"{run_id} PENDING" in queue(), 60, "its job pending")
            # The guardian first: killed after the supervisor, it could see it die and cancel the job
            # itself before its own end (seen once under a loaded CI).
            for program in ("guardian", "supervisor"):
                killed = on(HEAD, "pkill", "-KILL", "-u", "torchfleet", "-f", f"_on_node\\.{program} .*{run_id}")
                assert killed.returncode == 0, (program, killed.stderr)
        finally:
            launch.kill()
        assert f"{run_id} PENDING" in queue(), queue()  # the job outlived its supervisor
        stopped = torchfleet(cluster, "stop", run_id)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert run_id not in queue(), queue()


def put_on_every_node(path, text):
    for node in NODES:
        on(node, "install", "-d", "-o", "torchfleet", "-m", "0755", JOBS)
        done = subprocess.run(["docker", "exec", "-i", "-u", "torchfleet", node, "sh", "-c", f"cat > {path}"],
                              input=text, text=True, capture_output=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr


def rendered(cluster, fmt, *args):
    result = torchfleet(cluster, "render", "--format", fmt, "--nodes", "3", "-e", "nproc_per_node=2",
                        "examples/train.py", "--", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_render_under_slurm_shows_the_job_the_launch_submits(cluster):
    """`render --json --scheduler slurm`: sbatch's argv and the job's script, as the launch module
    writes them (slurm_job.first_job); only what render says differs is taken out."""
    from test_render_is_the_launch import QUICK, SITE

    run_id = f"tf-same-{uuid.uuid4().hex[:8]}"
    flags = ["--scheduler", "slurm", "-e", "slurm_partition=torchfleet", "-e", f"run_id={run_id}",
             "-e", "nproc_per_node=2", "--max-restarts", "1"]
    shown = torchfleet(cluster, "render", TICKER, "--json", *flags, *QUICK)
    assert shown.returncode == 0, shown.stderr[-3000:]
    rendered = json.loads(shown.stdout)
    launched = torchfleet(cluster, "launch", TICKER, *flags, *QUICK, timeout=LIMIT)
    assert launched.returncode == 0, launched.stdout[-2000:] + launched.stderr[-3000:]
    plan = json.loads(on(HEAD, "cat", f"{RUNS}/{run_id}/run.json").stdout)
    script = on(HEAD, "cat", f"{RUNS}/{run_id}/job.sbatch").stdout
    # sbatch by the head's full path; the ranks' sitecustomize.py, and torchrun's --tee left off
    # where the head reads the workers' files (dry_run.SUPERVISED, SLURM_DEFAULTS).
    assert plan["argv"][0].endswith("/sbatch") and plan["argv"][1:] == rendered["argv"][1:], (plan["argv"], rendered)
    site = re.compile(SITE.pattern.lstrip("^"))
    assert site.sub("", script) == rendered["batch_script"].replace(" --tee=3", ""), (script, rendered["batch_script"])
    assert "  --mca plm slurm \\\n" in script and f"#SBATCH --job-name={run_id}\n" in script, script


def test_the_rendered_slurm_script_runs_with_sbatch_wait_as_written(cluster):
    script = rendered(cluster, "slurm", *TRAINING)
    # The environment's own torchrun and Open MPI, as setup recorded them, not whatever PATH holds.
    torchrun = re.search(r"exec (\S+) --nnodes=3", script).group(1)
    assert torchrun.startswith("/") and torchrun.endswith("/bin/torchrun"), script
    assert re.search(r"^/\S+/mpirun(\.openmpi)? \\$", script, re.M) and "  --mca plm slurm \\\n" in script, script
    put_on_every_node(f"{JOBS}/train.py", (REPO / "examples" / "train.py").read_text())
    put_on_every_node(f"{JOBS}/job.sbatch", script.replace("examples/train.py", "train.py"))
    submitted = on(HEAD, "sbatch", "--wait", "--chdir", JOBS, "--output", f"{JOBS}/out-%j.txt",
                   f"{JOBS}/job.sbatch", user="torchfleet", timeout=LIMIT)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job = submitted.stdout.split()[-1]
    output = on(HEAD, "cat", f"{JOBS}/out-{job}.txt").stdout
    result = training_result(output)
    assert result["world_size"] == 6, output[-3000:]
    for rank in range(6):  # every node's two workers
        assert re.search(rf"TORCHFLEET_RANK rank={rank} .*host=node{rank // 2}\b", output), output[-3000:]


def test_the_pbs_scripts_body_runs_as_pbs_runs_it(cluster):
    """No PBS server can be had here: the body runs the way PBS runs a job, bash on the first
    node with PBS_NODEFILE (one line per slot) and PBS_JOBID set, mpirun over ssh."""
    script = rendered(cluster, "pbs", *TRAINING).replace("examples/train.py", "train.py")
    put_on_every_node(f"{JOBS}/train.py", (REPO / "examples" / "train.py").read_text())
    put_on_every_node(f"{JOBS}/job.pbs", script)
    put_on_every_node(f"{JOBS}/nodefile", "".join(f"node{i}\n" * 2 for i in range(3)))
    ran = on(HEAD, "env", f"PBS_NODEFILE={JOBS}/nodefile", "PBS_JOBID=17.pbs-server", f"PBS_O_WORKDIR={JOBS}",
             "bash", f"{JOBS}/job.pbs", user="torchfleet", timeout=LIMIT)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    result = training_result(ran.stdout)
    assert result["world_size"] == 6, ran.stdout[-3000:]
    for rank in range(6):
        assert re.search(rf"TORCHFLEET_RANK rank={rank} .*host=node{rank // 2}\b", ran.stdout), ran.stdout[-3000:]
