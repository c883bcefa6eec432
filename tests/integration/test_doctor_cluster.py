"""`torchfleet doctor` on a ready cluster: healthy, then a node unreachable, then four things broken at
once on three nodes, then repaired."""

import json
import subprocess
import sys

import pytest

from ready_cluster import NODES, REPO, run

HEAD, WORKER, OTHER = NODES
ENV_PYTHON = "/opt/torchfleet/envs/torchfleet/bin/python"


def doctor(cluster, *extra):
    """(exit code, results) of `python -m torchfleet.cli.doctor --json` against the cluster."""
    result = subprocess.run([sys.executable, "-m", "torchfleet.cli.doctor", "-i", str(cluster.inventory), "--json", *extra],
                            cwd=REPO, env=cluster.env, capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode in (0, 1), result.stdout[-2000:] + result.stderr[-3000:]
    return result.returncode, json.loads(result.stdout)["results"]


def failed(results):
    return [entry for entry in results if not entry["ok"]]


def docker_exec(node, *argv):
    result = run(["docker", "exec", node, *argv], timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def wait_for_listening(address, port, what):
    """Until something listens at `address`:`port`, seen from the head (bounded number of tries,
    no timing asserted)."""
    probe = ("import socket,sys\ntry:\n socket.create_connection((sys.argv[1], int(sys.argv[2])), 2).close()\n"
             "except OSError:\n sys.exit(1)")
    for _attempt in range(60):
        if run(["docker", "exec", HEAD, "python3", "-c", probe, address, str(port)], timeout=30).returncode == 0:
            return
        run(["sleep", "1"])
    pytest.fail(f"{what} never listened")


def wait_for_sshd(node):
    wait_for_listening(node, 22, f"sshd of {node}")


# Whether the doctor passed since the last test that broke something: this file's tests run one
# after another on one worker, so the check after a test is the check before the next one.
PASSED_SINCE_LAST_TEST = {"yes": False}


def assert_healthy(cluster):
    rc, results = doctor(cluster)
    assert rc == 0, failed(results)
    PASSED_SINCE_LAST_TEST["yes"] = True
    return results


@pytest.fixture
def healthy(cluster):
    """The cluster passes the doctor before and after each test (the one before is the last
    test's one after, where there was one)."""
    if not PASSED_SINCE_LAST_TEST["yes"]:
        assert_healthy(cluster)
    PASSED_SINCE_LAST_TEST["yes"] = False
    yield cluster
    assert_healthy(cluster)


def test_healthy_cluster_reports_docker0_as_information(cluster):
    PASSED_SINCE_LAST_TEST["yes"] = False
    results = assert_healthy(cluster)
    docker0 = [entry for entry in results if entry["check"] == "interfaces" and "docker0" in entry["reason"]]
    assert docker0 and docker0[0]["ok"] and docker0[0]["level"] == "info"
    assert "same address 172.17.0.1 on every node" in docker0[0]["reason"]
    assert {entry["check"] for entry in results} >= {"ssh", "versions", "gpus", "network", "port", "runs"}


def test_sshd_down_on_a_worker(healthy):
    # sshd is the node's first process: stopping it stops the node's container; `docker start` repairs.
    run(["docker", "exec", WORKER, "pkill", "sshd"], timeout=60)
    try:
        rc, results = doctor(healthy)
        assert rc == 1
        bad = {(entry["check"], entry["host"]): entry["reason"] for entry in failed(results)}
        assert bad[("ssh", WORKER)].startswith("unreachable from the controller")
        assert f"{HEAD} -> {WORKER}" in bad[("ssh", HEAD)] and "connection problem" in bad[("ssh", HEAD)]
    finally:
        run(["docker", "start", WORKER], timeout=120)
        wait_for_sshd(WORKER)


def test_four_things_broken_on_three_nodes_are_each_named_and_nothing_else(healthy):
    """A known_hosts line deleted and a package removed on one node, the rendezvous port taken on
    the head, a stale process of a run on a worker: one doctor run names each, on its node, and
    nothing more (four faults in one run, as a user's cluster has them, in a quarter of the runs)."""
    known_hosts = "/etc/ssh/ssh_known_hosts"
    wheelhouse = docker_exec(OTHER, "sh", "-c", "dirname $(find /opt/torchfleet/wheelhouse -name requirements.lock)").strip()
    version = docker_exec(OTHER, ENV_PYTHON, "-c", "import importlib.metadata as m; print(m.version('mpmath'))").strip()
    holder = "import socket,time\ns=socket.socket()\ns.bind(('0.0.0.0', 29500))\ns.listen()\ntime.sleep(600)"
    docker_exec(OTHER, "cp", known_hosts, "/tmp/known_hosts.doctor")
    try:
        docker_exec(OTHER, "sed", "-i", f"/^{HEAD},.* ssh-ed25519 /d", known_hosts)
        docker_exec(OTHER, ENV_PYTHON, "-m", "pip", "uninstall", "-y", "-q", "mpmath")
        docker_exec(HEAD, "sh", "-c", f"python3 -c \"{holder}\" >/dev/null 2>&1 & echo $! > /tmp/doctor-port.pid")
        # The holder starts in the background: on a busy machine the doctor could look first.
        wait_for_listening("127.0.0.1", 29500, "the port's holder")
        docker_exec(WORKER, "sh", "-c", "TORCHFLEET_RUN_ID=tf-doctor-stale sleep 600 >/dev/null 2>&1 & "
                                        "echo $! > /tmp/doctor-stale.pid")
        rc, results = doctor(healthy)
        assert rc == 1
        bad = {(entry["check"], entry["host"]): entry["reason"] for entry in failed(results)}
        assert set(bad) == {("ssh", OTHER), ("versions", OTHER), ("port", HEAD), ("runs", WORKER)}, bad
        assert "host key problem" in bad[("ssh", OTHER)] and f"ssh-ed25519 key of {HEAD}" in bad[("ssh", OTHER)]
        assert f"{OTHER} differs from {HEAD}" in bad[("versions", OTHER)]
        assert "mpmath missing" in bad[("versions", OTHER)]
        assert "29500 is taken" in bad[("port", HEAD)] and "pid" in bad[("port", HEAD)]
        assert "tf-doctor-stale" in bad[("runs", WORKER)]
        # Another port is fine: the port is no longer named, the rest still is.
        rc, results = doctor(healthy, "--master-port", "29511")
        assert rc == 1
        assert {(entry["check"], entry["host"]) for entry in failed(results)} == set(bad) - {("port", HEAD)}
    finally:
        docker_exec(OTHER, "cp", "/tmp/known_hosts.doctor", known_hosts)
        docker_exec(OTHER, ENV_PYTHON, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheelhouse,
                    f"mpmath=={version}")
        for node, pidfile in ((HEAD, "/tmp/doctor-port.pid"), (WORKER, "/tmp/doctor-stale.pid")):
            docker_exec(node, "sh", "-c", f"[ ! -f {pidfile} ] || {{ kill $(cat {pidfile}); rm {pidfile}; }}")
