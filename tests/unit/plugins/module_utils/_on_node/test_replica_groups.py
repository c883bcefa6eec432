"""Unit tests for plugins/module_utils/_on_node/replica_groups.py: each node's replica group run
for real as processes here (the other nodes' through a stand-in for ssh that runs the remote
command locally), the Lighthouse a sleeping process. What a lost node costs the others, on real
nodes: tests/integration/test_torchft.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import Node
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_request import LaunchRequest
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.replica_groups import GroupState, ReplicaGroups

# Runs the remote command (ssh's last argument) here, as the node would.
FAKE_SSH = ("#!{python}\nimport os, sys\nos.environ['FAKE_ADDRESS'] = sys.argv[-2]\n"
            "os.execvp('sh', ['sh', '-c', sys.argv[-1]])\n")


class Run:  # the supervisor's Run, as far as the groups ask it
    def __init__(self, tmp_path, **options):
        ssh = tmp_path / "ssh"
        ssh.write_text(FAKE_SSH.format(python=sys.executable))
        ssh.chmod(0o755)
        every = [{"name": f"n{index}", "address": f"127.0.0.{index + 1}", "slots": 1} for index in range(3)]
        request = LaunchRequest.of({"stop_grace": 2, "restart_wait": 3, "nodes": every, **options})
        self.plan = SimpleNamespace(head="n0", ssh=str(ssh), request=request, control_dir=None, cwd=str(tmp_path),
                                    paths={"run": str(tmp_path)}, run_id="tf-test")
        self.nodes = [Node("n0", "127.0.0.1", 1), Node("n1", "127.0.0.2", 1)]  # the world
        self.rewatched: list = []

    def rewatch(self, name):
        self.rewatched.append(name)


def groups_of(tmp_path, script: str, env=None, secrets=(), inherit=(), **options) -> ReplicaGroups:
    """The groups of a run of two nodes and a spare (n2), each running `script` (after its
    variables from stdin), rendered as the supervisor renders them: for every node of the run.
    Their processes carry another run id than the plan's: a node's clean-up (end_run_on_nodes,
    through the stand-in ssh) ends processes of the plan's run here, on the one machine."""
    argv = ["/bin/sh", "-c", 'eval "$(cat)"; ' + script, "torchfleet"]
    rendered = SimpleNamespace(
        argv=[sys.executable, "-c", "import time; time.sleep(60)"], nodes=("n0", "n1", "n2"),
        groups={"n0": argv, "n1": argv, "n2": argv}, env={"TORCHFLEET_RUN_ID": "tf-unit", "NUM_REPLICA_GROUPS": "3"},
        per_node_env={f"n{index}": {"REPLICA_GROUP_ID": str(index)} for index in range(3)},
        inherit=tuple(inherit), secrets=tuple(secrets))
    groups = ReplicaGroups(Run(tmp_path, **options), rendered, dict(os.environ, **(env or {})),
                           str(tmp_path / "launcher.log"))
    groups.start()
    return groups


def finish(groups: ReplicaGroups, within: float = 30) -> int:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            return groups.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            continue
    groups.cancel(1)
    raise AssertionError(f"the groups did not end within {within} s: {groups.shown()}")


def test_a_group_that_fails_by_itself_is_restarted_alone_and_the_run_ends_well(tmp_path):
    # Group 1 fails its first start; its second (TORCHFLEET_RESTART_COUNT=1) ends well.
    script = ('echo "$REPLICA_GROUP_ID $TORCHFLEET_RESTART_COUNT" >> "$0.starts"; '
              '[ "$REPLICA_GROUP_ID$TORCHFLEET_RESTART_COUNT" = 10 ] && exit 3; sleep 1; exit 0')
    groups = groups_of(tmp_path, script.replace("$0", str(tmp_path / "g")), max_restarts=1)
    assert finish(groups) == 0
    shown = groups.shown()
    assert (shown["n0"]["starts"], shown["n0"]["restarts"]) == (1, 0)  # untouched
    assert (shown["n1"]["starts"], shown["n1"]["restarts"]) == (2, 1)
    assert sorted((tmp_path / "g.starts").read_text().split("\n")[:-1]) == ["0 0", "1 0", "1 1"]
    assert groups.message == "every replica group ended with 0"


def test_a_group_whose_restarts_are_spent_fails_the_run_naming_its_node(tmp_path):
    groups = groups_of(tmp_path, '[ "$REPLICA_GROUP_ID" = 1 ] && exit 7; sleep 1; exit 0', max_restarts=1)
    assert finish(groups) == 7
    assert groups.shown()["n1"]["state"] == GroupState.FAILED.value
    assert groups.message == "n1's replica group exited with code 7 after 1 restart(s)"
    assert groups.shown()["n0"]["state"] == "done"  # the other trained to its end


def test_every_group_failing_ends_the_run_with_the_first_ones_code(tmp_path):
    groups = groups_of(tmp_path, '[ "$REPLICA_GROUP_ID" = 1 ] && sleep 0.5; exit $((5 + REPLICA_GROUP_ID))')
    assert finish(groups) == 5
    assert groups.message == "n0's replica group exited with code 5; n1's replica group exited with code 6"


def test_the_variables_and_secrets_come_on_stdin_never_on_a_command_line(tmp_path):
    out = tmp_path / "env.json"
    script = (f'{sys.executable} -c "import json, os; print(json.dumps(dict(os.environ)))" > {out}.$REPLICA_GROUP_ID; '
              'sleep 0.5')
    groups = groups_of(tmp_path, script, env={"TOKEN": "s3cret value", "PASSED": "x y"}, secrets=("TOKEN",),
                       inherit=("PASSED",))
    seen = []
    while groups.poll() is None:  # the command lines of the groups' processes while they run
        for pid in os.listdir("/proc"):
            try:
                seen.append(open(f"/proc/{pid}/cmdline", "rb").read())
            except OSError:
                continue
        try:
            groups.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            pass
    assert groups.returncode == 0
    for index in ("0", "1"):
        env = json.loads((tmp_path / f"env.json.{index}").read_text())
        assert env["TOKEN"] == "s3cret value" and env["PASSED"] == "x y" and env["REPLICA_GROUP_ID"] == index
        assert env["RUST_LOG"] == "warn"  # torchft's per-step INFO lines, off unless the run asks
    assert not any(b"s3cret" in line for line in seen)


def test_a_stop_ends_every_group_and_the_lighthouse(tmp_path):
    groups = groups_of(tmp_path, "sleep 60")
    procs = [group.proc for group in groups.groups] + [groups.lighthouse]
    groups.cancel(1)
    assert groups.returncode == 143
    assert all(proc.poll() is not None for proc in procs)


def test_the_lighthouse_writes_its_own_log_not_the_runs_output(tmp_path):
    groups = groups_of(tmp_path, "exit 0")
    assert finish(groups) == 0
    assert (tmp_path / "lighthouse.log").exists()


def test_a_spare_takes_a_lost_groups_place_at_once_and_the_node_back_is_a_spare(tmp_path):
    # n1's ssh drops (255): n2, the spare, runs group 1 at once; n1, answering again, waits as a spare.
    log = tmp_path / "ran"
    script = (f'[ "$FAKE_ADDRESS" = 127.0.0.2 ] && exit 255; '
              f'echo "${{FAKE_ADDRESS:-head}} $REPLICA_GROUP_ID $NUM_REPLICA_GROUPS" >> {log}; sleep 2; exit 0')
    groups = groups_of(tmp_path, script)
    assert finish(groups) == 0
    assert sorted(log.read_text().splitlines()) == ["127.0.0.3 1 2", "head 0 2"]
    shown = groups.shown()
    assert (shown["n2"]["group"], shown["n2"]["state"]) == (1, "done")
    assert shown["n1"]["state"] in ("lost", "spare") and shown["n1"]["losses"], shown
    assert groups.message == "every replica group ended with 0 (n1 lost, not back before the end)" or \
        groups.message == "every replica group ended with 0", groups.message
