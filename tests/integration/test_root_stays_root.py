"""Root stays root's (docs/security.md): the training account, with a shell on every node, plants
links where setup writes as root, and rewrites a run's plan that root's follower reads; another
account forges a board entry ten years ahead, and plants a record in a shared log_dir naming a
directory of the training account's. None of them turns torchfleet's privileges, or another
account's, against the cluster. On the session's shared cluster; every file moved aside is put
back, so the nodes are left as setup left them."""

import json
import subprocess
import sys
import time

import pytest

from ready_cluster import NODES, REPO, recap, run
from test_run_lifecycle import SHORT, TICKER

pytestmark = pytest.mark.cluster
HOME = "/home/torchfleet"
LIMIT = 600


def as_account(node, script, check=True):
    done = run(["docker", "exec", "-u", "torchfleet", node, "sh", "-c", script], timeout=60)
    assert done.returncode == 0 or not check, done.stderr
    return done


def as_root(node, script):
    done = run(["docker", "exec", node, "sh", "-c", script], timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def torchfleet(cluster, *args):
    return subprocess.run([sys.executable, "-m", "torchfleet", args[0], "-i", str(cluster.inventory), *args[1:]],
                          cwd=REPO, env=cluster.env, capture_output=True, text=True, timeout=LIMIT, check=False)


@pytest.fixture
def planted(cluster):
    """On node1, the account's links: ~/.ssh/authorized_keys to root's, ~/.local to a directory of
    root's, ~/.ansible/tmp dangling under /etc; what they replaced is moved aside, then put back."""
    node = NODES[1]
    as_root(node, "install -d -m 0755 -o root -g root /opt/tf-roots-dir && rm -rf /etc/tf-planted")
    as_account(node, f"cd {HOME} && mv .ssh/authorized_keys .ssh/authorized_keys.mine"
                     f" && ln -s /root/.ssh/authorized_keys .ssh/authorized_keys"
                     f" && mv .local .local.mine && ln -s /opt/tf-roots-dir .local"
                     f" && mv .ansible/tmp .ansible/tmp.mine && ln -s /etc/tf-planted/deep .ansible/tmp")
    before = as_root(node, "sha256sum /root/.ssh/authorized_keys; stat -c '%U %a' /opt/tf-roots-dir")
    yield node, before
    as_account(node, f"cd {HOME} && rm -f .ssh/authorized_keys .local .ansible/tmp"
                     f" && mv .ssh/authorized_keys.mine .ssh/authorized_keys && mv .local.mine .local"
                     f" && mv .ansible/tmp.mine .ansible/tmp")
    as_root(node, "rm -rf /opt/tf-roots-dir")


def test_links_the_account_planted_are_refused_by_name_and_root_writes_nothing_through_them(cluster, planted):
    node, before = planted
    rc, output = cluster.playbook("setup.yml")
    said = " ".join(output.split())
    assert rc != 0, output[-3000:]
    print(said[said.find("refusing to set this node up"):][:1500])
    assert f"fatal: [{node}]: FAILED! => {{\"changed\": false, \"msg\": \"refusing to set this node up, " \
           f"nothing changed: " in said, said[-3000:]
    for link, target in ((".ssh/authorized_keys", "/root/.ssh/authorized_keys"), (".local", "/opt/tf-roots-dir"),
                         (".ansible/tmp", "/etc/tf-planted/deep")):
        assert f"{HOME}/{link} is a symbolic link (to {target})" in said and f"(rm {HOME}/{link})" in said, said[-3000:]
    # Only node1 failed, at its first task that could change anything; the others converged.
    ended = recap(output)
    assert ended[node]["failed"] == 1 and ended[node]["changed"] == 0, ended
    assert all(ended[other]["failed"] == 0 for other in NODES if other != node), ended
    assert as_root(node, "sha256sum /root/.ssh/authorized_keys; stat -c '%U %a' /opt/tf-roots-dir") == before
    assert as_root(node, "ls /etc | grep -c tf-planted || true").strip() == "0"
    # The cluster's key, the training account's on the head, does not log in as root on node1.
    denied = as_account(NODES[0], f"ssh -o BatchMode=yes -o ConnectTimeout=10 root@{node} id", check=False)
    assert denied.returncode != 0 and "uid=0" not in denied.stdout, (denied.stdout, denied.stderr)
    assert "Permission denied" in denied.stderr, denied.stderr


def test_root_following_a_run_whose_plan_a_rank_rewrote_runs_nothing_of_the_accounts_as_root(cluster):
    launched = torchfleet(cluster, "launch", TICKER, "-e", "nproc_per_node=1", "--", *SHORT)
    assert launched.returncode == 0, launched.stderr[-3000:]
    listed = torchfleet(cluster, "runs", "--json")
    run_id = json.loads(listed.stdout)[0]["run_id"]
    head, run_dir = NODES[0], f"{HOME}/torchfleet/runs/{run_id}"
    # What a rank of the run can do: its plan and record name a program and package of the
    # account's, and workers under /root (the old follower stayed root for a directory of root's).
    as_root(head, "rm -f /tmp/tf-marker.*")
    rewrite = (
        "import json, os, shutil, sys\n"
        "run_dir, home = sys.argv[1], sys.argv[2]\n"
        "marker = os.path.join(home, 'marker')\n"
        "open(marker, 'w').write('#!/bin/sh\\nid -u > /tmp/tf-marker.$$\\nexit 1\\n')\n"
        "os.chmod(marker, 0o755)\n"
        "plan = json.load(open(os.path.join(run_dir, 'run.json')))\n"
        "package = os.path.join(home, 'evil', '_on_node')\n"
        "shutil.copytree(plan['package'], package, dirs_exist_ok=True)\n"
        "plan.update(ssh=marker, package=package, worker_files=True)\n"
        "plan['paths']['workers'] = '/root/tf-workers'\n"
        "json.dump(plan, open(os.path.join(run_dir, 'run.json'), 'w'))\n"
        "state = json.load(open(os.path.join(run_dir, 'state.json')))\n"
        "for attempt in state.get('attempts') or []:\n"
        "    attempt['workers'] = '/root/tf-workers'\n"
        "json.dump(state, open(os.path.join(run_dir, 'state.json'), 'w'))\n")
    as_account(head, f"python3 - {run_dir} {HOME} <<'EOF'\n{rewrite}EOF")
    try:
        logs = torchfleet(cluster, "logs", "--all-ranks", run_id)
        waited = torchfleet(cluster, "wait", run_id)
        print(logs.stdout[-500:], logs.stderr[-500:], waited.stdout[-300:], waited.stderr[-300:])
        uids = as_root(head, "cat /tmp/tf-marker.* 2>/dev/null || true").split()
        # The marker ran as the account (the follower put root's privileges down first), never as root.
        account_uid = as_root(head, "id -u torchfleet").strip()
        assert uids and set(uids) == {account_uid}, (uids, logs.stderr[-2000:])
    finally:
        as_account(head, f"rm -rf {HOME}/marker {HOME}/evil {run_dir}")
        as_root(head, "rm -f /tmp/tf-marker.*")


def test_a_board_entry_dated_ten_years_ahead_counts_only_for_its_grace(cluster):
    # Another account (nobody) writes an entry on every node and dates it ten years ahead: it has
    # no process behind it, so it counts only for the grace after it was written (its ctime).
    forged = "tf-forged-entry"
    entry = json.dumps({"run_id": forged, "head": NODES[0], "nodes": NODES, "world_size": 3, "started": "2036-01-01"})
    path = f"/var/lib/torchfleet/board/65534.{forged}.json"
    for node in NODES:
        run(["docker", "exec", "-i", "-u", "nobody", node, "sh", "-c", f"cat > {path} && touch -d '+10 years' {path}"],
            input=entry, timeout=60, check=True)
    try:
        refused = torchfleet(cluster, "launch", TICKER, "-e", "nproc_per_node=1", "--", *SHORT)
        said = " ".join(refused.stderr.split())
        assert refused.returncode != 0 and f"run {forged} of account nobody (starting," in said, said[-3000:]
        # The board's own reading on the node, a grace later: the entry no longer counts, whatever
        # its mtime says.
        check = ("import sys, time; sys.path.insert(0, '/tmp'); import board; "
                 f"print('{forged}' in [e['run_id'] for e in board.read_entries(now=time.time() + board.STARTING_FOR + 1)])")
        source = (REPO / "plugins" / "module_utils" / "_on_node" / "board.py").read_text()
        run(["docker", "exec", "-i", NODES[0], "sh", "-c", "cat > /tmp/board.py"], input=source, timeout=60, check=True)
        later = as_account(NODES[0], f"python3 -c \"{check}\"").stdout.strip()
        assert later == "False", later
        assert int(as_root(NODES[0], f"stat -c %Y {path}")) > time.time() + 9 * 365 * 86400  # its mtime: ahead still
    finally:
        for node in NODES:
            as_root(node, f"rm -f {path} /tmp/board.py")


def test_a_record_planted_in_a_shared_log_dir_prunes_nothing_it_names(cluster):
    # Another account's record, in a log_dir every account writes, names a directory of the
    # training account's: the account's prune leaves it.
    shared, precious = "/tmp/tf-shared-logs", f"{HOME}/precious"
    as_root(NODES[0], f"install -d -m 1777 {shared}")
    as_account(NODES[0], f"mkdir -p {precious}/checkpoints")
    record = json.dumps({"run_id": "precious", "state": "failed", "started_at": 1, "log_dir": precious})
    run(["docker", "exec", "-i", "-u", "nobody", NODES[0], "sh", "-c",
         f"mkdir -p {shared}/precious && cat > {shared}/precious/state.json"], input=record, timeout=60, check=True)
    try:
        # Only runs started over a century ago: the planted record says 1970, every real run is kept.
        pruned = torchfleet(cluster, "runs", "--prune", "--older-than", "36500", "-e", f"log_dir={shared}")
        assert pruned.returncode == 0, pruned.stderr[-2000:]
        assert as_root(NODES[0], f"test -d {precious}/checkpoints && test -d {shared}/precious && echo kept").strip() \
            == "kept"
    finally:
        as_root(NODES[0], f"rm -rf {shared} {precious}")


def test_a_record_the_account_planted_runs_nothing_on_the_controller(cluster, tmp_path):
    # The training account's own record, whose log_dir is a template: prune would hand it to
    # Ansible, which would run the lookup as the controller's user.
    marker = tmp_path / "prune_pwned"
    run_id = "tf-20260101-000000-abcdef"
    record = json.dumps({"run_id": run_id, "state": "succeeded", "started_at": 1,
                         "log_dir": "{{ lookup('pipe', 'id > " + str(marker) + "') }}"})
    run(["docker", "exec", "-i", "-u", "torchfleet", NODES[0], "sh", "-c",
         f"mkdir -p {HOME}/torchfleet/runs/{run_id} && cat > {HOME}/torchfleet/runs/{run_id}/state.json"],
        input=record, timeout=60, check=True)
    try:
        pruned = torchfleet(cluster, "runs", "--prune", "--older-than", "36500")
        assert pruned.returncode == 0, pruned.stderr[-2000:]
        assert f"left alone, not as torchfleet writes it: the record of run '{run_id}'" in pruned.stderr, pruned.stderr
        assert not marker.exists()
    finally:
        as_root(NODES[0], f"rm -rf {HOME}/torchfleet/runs/{run_id}")
