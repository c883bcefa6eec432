"""A cluster a team shares. Two accounts without Slurm: a launch onto nodes where another
account's run is alive is refused, naming that run and its account, whatever port it picks;
`status` and `runs --all-users` show the other account's run; --share-nodes shares the nodes on
purpose. With Slurm (set up by the session's setup), the two accounts' runs queue instead, and
`runs --all-users` shows both. Part of the nodes on request: --limit and -e exclude, over ssh
and under Slurm.

The cluster is the session's shared one. The second account (tfbob) is set up with a fact cache
of its own, so that the session's cached facts stay the first account's.
"""

import json
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ready_cluster import NODES, REPO, run
# Who may run where is the point here, not training: ticker.py's ranks (ENDLESS until stopped,
# SHORT about 10 s).
from test_run_lifecycle import ENDLESS, SHORT, TICKER

pytestmark = pytest.mark.cluster
BOB = "tfbob"
RUNS = "/home/torchfleet/torchfleet/runs"
LIMIT = 300
LOCAL_FACTS = "/etc/ansible/facts.d/torchfleet.fact"


def torchfleet(env, cluster, command, *args):
    return subprocess.run([sys.executable, "-m", "torchfleet", command, "-i", str(cluster.inventory), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=LIMIT, check=False)


@pytest.fixture(scope="module")
def bob(cluster, tmp_path_factory):
    """The environment of the second account's commands: its own fact cache, set up once."""
    facts = tmp_path_factory.mktemp("bob") / "facts"
    shutil.copytree(cluster.env["ANSIBLE_CACHE_PLUGIN_CONNECTION"], facts)
    env = dict(cluster.env, ANSIBLE_CACHE_PLUGIN_CONNECTION=str(facts))
    # Setup records the account it set up on every node (local facts). What the session's setup
    # recorded is put back afterwards, so that later tests find the nodes as that setup left them
    # (bob's account, files and keys stay, as a second account's would).
    recorded = {node: run(["docker", "exec", node, "cat", LOCAL_FACTS], timeout=60, check=True).stdout
                for node in NODES}
    result = run(["ansible-playbook", "setup.yml", "-i", str(cluster.inventory), "-e", f"cluster_user_name={BOB}",
                  "-e", f"ssh_trust_key_file={cluster.key}"], env=env, timeout=1800)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    yield env
    for node, text in recorded.items():
        run(["docker", "exec", "-i", node, "sh", "-c", f"cat > {LOCAL_FACTS}"], input=text, timeout=60, check=True)


def test_another_accounts_launch_is_refused_naming_the_run_and_status_shows_it(cluster, bob):
    started = torchfleet(cluster.env, cluster, "launch", TICKER, "-e", "nproc_per_node=1",
                         "--detach", "--", *ENDLESS)
    assert started.returncode == 0, started.stderr[-3000:]
    run_id = started.stdout.split()[1]
    shared = None
    try:
        # Another port too: the board, not the port, tells that the nodes are taken.
        refused = torchfleet(bob, cluster, "launch", TICKER, "-e", f"cluster_user_name={BOB}",
                             "-e", "master_port=29650", "-e", "nproc_per_node=1", "--", *ENDLESS)
        said = " ".join(refused.stderr.split())
        assert refused.returncode != 0, refused.stdout[-2000:]
        print(said[said.find("refusing to launch"):][:700])
        # Named among the runs alive there (an earlier test's run may still count, for a while).
        assert "another account's torchfleet run is alive on these nodes: run " in said, said[-3000:]
        assert f"run {run_id} of account torchfleet (running, started 20" in said, said[-3000:]
        assert "world size 3" in said and NODES[0] in said and "share_nodes=true" in said, said[-3000:]
        assert not _alive_of(BOB), "the refused launch left a process"
        # Bob sees the other account's run: on each node (status) and on the head (runs --all-users).
        status = torchfleet(bob, cluster, "status", "-e", f"cluster_user_name={BOB}", "--json")
        assert status.returncode == 0, status.stderr[-3000:]
        others = json.loads(status.stdout)["others"]
        assert all((run_id, "torchfleet") in [(entry["run_id"], entry["account"]) for entry in others[node]]
                   for node in NODES), others
        listed = torchfleet(bob, cluster, "runs", "-e", f"cluster_user_name={BOB}", "--all-users", "--json")
        assert listed.returncode == 0, listed.stderr[-3000:]
        assert [(item["run_id"], item["account"], item["state"], item["world_size"])
                for item in json.loads(listed.stdout) if item["run_id"] == run_id] == [
                    (run_id, "torchfleet", "running", 3)], listed.stdout
        text = torchfleet(bob, cluster, "runs", "-e", f"cluster_user_name={BOB}", "--all-users")
        print(text.stdout)
        # On purpose: --share-nodes starts beside it, and the first account sees it in turn.
        shared = torchfleet(bob, cluster, "launch", TICKER, "-e", f"cluster_user_name={BOB}",
                            "-e", "master_port=29650", "-e", "nproc_per_node=1", "--share-nodes", "--detach",
                            "--", *ENDLESS)
        assert shared.returncode == 0, shared.stderr[-3000:]
        bobs_run = shared.stdout.split()[1]
        status = torchfleet(cluster.env, cluster, "status", "--json")
        others = json.loads(status.stdout)["others"]
        assert all(bobs_run in [entry["run_id"] for entry in others[node]] for node in NODES), others
    finally:
        if shared is not None and shared.returncode == 0:
            torchfleet(bob, cluster, "stop", "-e", f"cluster_user_name={BOB}", "--all")
        torchfleet(cluster.env, cluster, "stop", "--all")
    _nothing_left_of_either()


def test_two_accounts_launching_at_the_same_instant_start_one_run_and_the_other_names_it(cluster, bob):
    # Each announces on the board, then reads it: of the two, one goes on (another port too: the
    # board, not the port, decides).
    argv = {"torchfleet": (cluster.env, []), BOB: (bob, ["-e", f"cluster_user_name={BOB}", "-e", "master_port=29650"])}
    barrier = threading.Barrier(2)

    def launch(account):
        env, extra = argv[account]
        barrier.wait()
        return torchfleet(env, cluster, "launch", TICKER, *extra, "-e", "nproc_per_node=1", "--detach",
                          "--", *ENDLESS)
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            done = dict(zip(argv, pool.map(launch, argv)))
        started = [account for account, result in done.items() if result.returncode == 0]
        assert len(started) == 1, {account: result.stderr[-1500:] for account, result in done.items()}
        [winner], [loser] = started, [account for account in argv if account not in started]
        run_id = done[winner].stdout.split()[1]
        said = " ".join(done[loser].stderr.split())
        print(said[said.find("refusing to launch"):][:500])
        assert "another account's torchfleet run is alive on these nodes: run " in said, said[-3000:]
        assert f"run {run_id} of account {winner} (" in said, said[-3000:]
        assert not _alive_of(loser), "the refused launch left a process"
    finally:
        torchfleet(bob, cluster, "stop", "-e", f"cluster_user_name={BOB}", "--all")
        torchfleet(cluster.env, cluster, "stop", "--all")
    _nothing_left_of_either()


def _nothing_left_of_either():
    """Within 30 s of the stops, no process of either account's runs on any node."""
    deadline = time.monotonic() + 30
    while (_alive_of("torchfleet") or _alive_of(BOB)) and time.monotonic() < deadline:
        time.sleep(1)
    assert not _alive_of("torchfleet") and not _alive_of(BOB)


def _alive_of(account):
    found = []
    for node in NODES:
        listing = run(["docker", "exec", node, "pgrep", "-u", account, "-a", "-f", r"ticker\.py|torchrun|orted"],
                      timeout=60)
        found += [f"{node}: {line}" for line in listing.stdout.splitlines()]
    return found


@pytest.mark.parametrize("scheduler, choice", [("none", ["--limit", f"{NODES[0]},{NODES[2]}"]),
                                               ("slurm", ["-e", f"exclude={NODES[1]}"])])
def test_part_of_the_nodes_runs_on_those_alone(cluster, scheduler, choice):
    done = torchfleet(cluster.env, cluster, "launch", "--scheduler", scheduler, *choice, TICKER,
                      "-e", "nproc_per_node=1", "--", *SHORT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    last = done.stdout.splitlines()[-1]
    run_id = last.split()[1].rstrip(":")
    assert last.startswith(f"run {run_id}: rc 0, world size 2, "), last
    record = json.loads(run(["docker", "exec", NODES[0], "cat", f"{RUNS}/{run_id}/state.json"], timeout=60).stdout)
    assert (record["state"], record["world_size"], record["nodes"]) == ("succeeded", 2, [NODES[0], NODES[2]]), record
    if scheduler == "slurm":  # the job's nodes are the named ones: Slurm was told to leave node1 out
        assert record["job_nodes"] == ["node0", "node2"], record


def test_under_slurm_two_accounts_runs_queue_and_both_succeed(cluster, bob):
    first = torchfleet(cluster.env, cluster, "launch", "--scheduler", "slurm", "--detach", TICKER,
                       "-e", "nproc_per_node=1", "--", "--ticks", "30", "--sleep", "0.5")
    assert first.returncode == 0, first.stderr[-3000:]
    first_id = first.stdout.split()[1]
    try:
        # Bob's launch is refused neither by the board nor by the port: Slurm queues it (whole
        # nodes, all three taken).
        second = torchfleet(bob, cluster, "launch", "--scheduler", "slurm", "--detach", "-e", "detach_when=submitted",
                            "-e", f"cluster_user_name={BOB}", TICKER, "-e", "nproc_per_node=1", "--",
                            *SHORT)
        assert second.returncode == 0, second.stderr[-3000:]
        second_id = second.stdout.split()[1]
        listed = torchfleet(bob, cluster, "runs", "-e", f"cluster_user_name={BOB}", "--all-users", "--json")
        runs = {item["run_id"]: item for item in json.loads(listed.stdout)}
        print(torchfleet(bob, cluster, "runs", "-e", f"cluster_user_name={BOB}", "--all-users").stdout)
        assert runs[first_id]["account"] == "torchfleet" and runs[second_id]["account"] == BOB, runs
        assert runs[second_id]["job_state"] == "PENDING", runs[second_id]
        # status shows Slurm's queue too, every account's jobs with their accounts.
        status = torchfleet(cluster.env, cluster, "status", "--json")
        assert (second_id, BOB) in {(job["name"], job["user"]) for job in json.loads(status.stdout)["jobs"]}, status.stdout
        for env, run_id, extra in ((cluster.env, first_id, []), (bob, second_id, ["-e", f"cluster_user_name={BOB}"])):
            waited = torchfleet(env, cluster, "wait", run_id, *extra)
            assert waited.returncode == 0, waited.stdout[-2000:] + waited.stderr[-2000:]
    finally:
        torchfleet(bob, cluster, "stop", "-e", f"cluster_user_name={BOB}", "--all")
        torchfleet(cluster.env, cluster, "stop", "--all")
    record = json.loads(run(["docker", "exec", NODES[0], "cat", f"/home/{BOB}/torchfleet/runs/{second_id}/state.json"],
                            timeout=60).stdout)
    assert record["state"] == "succeeded" and record["scheduler"] == "slurm", record


BOARD = "/var/lib/torchfleet/board"


def test_entries_another_account_plants_on_the_board_refuse_nothing_and_are_named(cluster):
    # On node1: daemon writes one entry nested 60,000 deep; nobody writes 71 entries named for the
    # training account's uid (the sticky bit keeps that account from removing them).
    uid = run(["docker", "exec", NODES[1], "id", "-u", "torchfleet"], timeout=60, check=True).stdout.strip()
    deep = f"open('{BOARD}/1.tf-deep.json', 'w').write('[' * 60000)"
    named = (f"import json\nfor n in range(71): "
             f"open(f'{BOARD}/{uid}.-{{n}}.json', 'w').write(json.dumps({{'run_id': f'-{{n}}'}}))")
    run(["docker", "exec", "-u", "daemon", NODES[1], "python3", "-c", deep], timeout=60, check=True)
    run(["docker", "exec", "-u", "nobody", NODES[1], "python3", "-c", named], timeout=60, check=True)
    try:
        done = torchfleet(cluster.env, cluster, "launch", TICKER, "-e", "nproc_per_node=1", "--", *SHORT)
        said = " ".join((done.stdout + done.stderr).split())
        assert done.returncode == 0, said[-3000:]
        # Named in one line of the launch's output, as what they are: never a refusal, never ssh.
        line = said[said.find("run board entries not counted"):][:700]
        print(line)
        assert f"{NODES[1]}: 1 of daemon (not an entry: JSON nested deeper than" in line, said[-3000:]
        assert "64 of nobody (its name speaks for another account" in line, line
        assert "1 of nobody (beyond the 64 read of one account: 7 more)" in line, line
        assert "cannot reach" not in said
    finally:
        run(["docker", "exec", NODES[1], "find", BOARD, "(", "-user", "nobody", "-o", "-user", "daemon", ")",
             "-delete"], timeout=60)
