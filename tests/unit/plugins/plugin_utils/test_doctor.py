"""The doctor's judgement (_doctor.py), without a cluster; the command's table, JSON and exit codes
(torchfleet/cli/doctor.py) are in tests/unit/torchfleet/cli/test_doctor_command.py."""

import pytest

from ansible_collections.torchfleet.cluster.plugins.plugin_utils._doctor import (
    analyse_interfaces, common_interfaces, doctor_results, known_hosts_block, probe_plan, ssh_problem,
    ssh_targets)
from torchfleet.cli import doctor

NODES = ("n0", "n1", "n2")
ETH = {"n0": "10.0.0.1", "n1": "10.0.0.2", "n2": "10.0.0.3"}


def all_reach(iface, nodes=NODES):
    return {iface: {a: {b: True for b in nodes if b != a} for a in nodes}}


# --- the probing analysis -------------------------------------------------------------------

def test_common_interfaces_leave_out_loopback_and_partial_ones():
    assert common_interfaces([["lo", "eth0", "docker0", "ib0"], ["lo", "eth0", "docker0"], ["eth0", "docker0"]]) \
        == ["docker0", "eth0"]
    assert common_interfaces([]) == []


def test_docker0_with_one_address_everywhere_is_unusable():
    addresses = {node: {"eth0": ETH[node], "docker0": "172.17.0.1"} for node in NODES}
    reach = all_reach("eth0")
    reach.update(all_reach("docker0"))  # even when connects "succeed" (they land on the node itself)
    found = {entry["interface"]: entry for entry in analyse_interfaces(addresses, reach, ["eth0"])}
    assert found["docker0"]["usable"] is False
    assert "same address 172.17.0.1 on every node" in found["docker0"]["reason"]
    assert found["docker0"]["cluster"] is False
    assert found["eth0"]["usable"] is True and found["eth0"]["cluster"] is True
    assert found["eth0"]["addresses"] == ETH


def test_an_address_shared_by_some_nodes_names_them():
    addresses = {"n0": {"ib0": "192.168.0.1"}, "n1": {"ib0": "192.168.0.1"}, "n2": {"ib0": "192.168.0.3"}}
    (entry,) = analyse_interfaces(addresses, all_reach("ib0"))
    assert entry["usable"] is False
    assert "192.168.0.1 on n0, n1" in entry["reason"]


def test_a_pair_that_cannot_connect_makes_the_interface_unusable():
    addresses = {node: {"eth1": f"10.9.0.{i}"} for i, node in enumerate(NODES, 1)}
    reach = all_reach("eth1")
    reach["eth1"]["n2"]["n0"] = "Connection timed out"
    del reach["eth1"]["n1"]["n2"]  # never probed
    (entry,) = analyse_interfaces(addresses, reach)
    assert entry["usable"] is False
    assert "n2 cannot reach n0 (10.9.0.1): Connection timed out" in entry["reason"]
    assert "n1 cannot reach n2 (10.9.0.3): no answer" in entry["reason"]


def test_one_node_alone_is_usable():
    (entry,) = analyse_interfaces({"n0": {"eth0": "10.0.0.1"}}, {})
    assert entry["usable"] is True


def test_probe_plan_covers_every_pair_and_the_head():
    maps = {node: {"lo": "127.0.0.1", "eth0": ETH[node], "docker0": "172.17.0.1"} for node in NODES}
    plan = probe_plan(maps, "n1", "n0", "eth0", "10.0.0.1")
    keys = sorted(probe["key"] for probe in plan)
    assert keys == ["(head)", "docker0|n0", "docker0|n2", "eth0|n0", "eth0|n2"]
    eth_to_n2 = next(probe for probe in plan if probe["key"] == "eth0|n2")
    assert eth_to_n2 == {"key": "eth0|n2", "interface": "eth0", "source": "10.0.0.2", "target": "10.0.0.3", "port": 22}
    assert all(probe["key"] != "(head)" for probe in probe_plan(maps, "n0", "n0", "eth0", "10.0.0.1"))


def test_ssh_targets_by_address_and_name():
    nets = {"n0": {"address": "10.0.0.1"}, "n1": {"address": "10.0.0.2"}, "n2": {}}
    assert ssh_targets(nets, "n0") == [{"peer": "n1", "target": "10.0.0.2"}, {"peer": "n1", "target": "n1"},
                                       {"peer": "n2", "target": "n2"}]


@pytest.mark.parametrize("stderr, kind", [
    ("Host key verification failed.", "host key"),
    ("@@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@", "host key"),
    ("torchfleet@n1: Permission denied (publickey).", "authentication"),
    ("ssh: connect to host 10.0.0.2 port 22: Connection refused", "connection"),
    ("ssh: Could not resolve hostname n1: Name or service not known", "connection"),
])
def test_ssh_problem(stderr, kind):
    assert ssh_problem(stderr) == kind


def test_known_hosts_block():
    content = "other ssh-rsa AAA\n# BEGIN torchfleet cluster: x\nn0 ssh-ed25519 K0\n\n# END torchfleet cluster: x\n"
    assert known_hosts_block(content, "torchfleet cluster") == ["n0 ssh-ed25519 K0"]


# --- judging the findings ---------------------------------------------------------------------

LOCK_ENV = {"packages": {"torch": "2.13.0+cpu", "numpy": "2.4.6"}, "python_version": "3.11.2",
            "fingerprint": "f" * 64, "drift": []}
KNOWN = [f"{node},{ETH[node]} ssh-ed25519 KEY{node}" for node in NODES]


def healthy(node, launch=False):
    others = [peer for peer in NODES if peer != node]
    probe = {"interfaces": {"lo": "127.0.0.1", "eth0": ETH[node], "docker0": "172.17.0.1"},
             "connect": {**{f"eth0|{peer}": {"ok": True, "error": ""} for peer in others},
                         **{f"docker0|{peer}": {"ok": False, "error": "the target address is this node's own"}
                            for peer in others},
                         **({} if node == "n0" else {"(head)": {"ok": True, "error": ""}})},
             "port": {"in_use": False, "holders": []} if node == "n0" else None}
    rc, stderr = (0, "") if launch else (255, "torchfleet@x: Permission denied (publickey).")
    return {
        "reachable": True, "launch_node": launch,
        "known_hosts": "# BEGIN torchfleet cluster: m\n" + "\n".join(KNOWN) + "\n# END torchfleet cluster: m\n",
        "cluster_net": {"interface": "eth0", "address": ETH[node]},
        "ssh": [{"item": {"peer": peer, "target": target}, "rc": rc, "stderr": stderr}
                for peer in others for target in (ETH[peer], peer)],
        "probe": probe,
        "ifaces": {"interfaces": probe["interfaces"]},
        "mpirun": {"rc": 0, "stdout": "mpirun (Open MPI) 4.1.4\n"},
        "locks": ["/opt/torchfleet/wheelhouse/abc/requirements.lock"],
        "env": dict(LOCK_ENV),
        "nccl": {"version": "2.29.7", "library": "x"},
        "gpus": {"rc": None, "msg": "Error executing command."},
        "gpu_apps": {"rc": None, "msg": "Error executing command."},
        "runs": {"runs": []},
    }


def cluster(**changes):
    raws = {node: healthy(node, launch=node == "n0") for node in NODES}
    for node, change in changes.items():
        change(raws[node])
    return raws


def judge(raws, **kwargs):
    return doctor_results(raws, head="n0", master_port=29500, known_hosts=KNOWN, **kwargs)


def failures(results):
    return [(entry["check"], entry["host"]) for entry in results if not entry["ok"]]


def test_a_healthy_cluster_passes_and_reports_docker0_as_information():
    results = judge(cluster())
    assert failures(results) == []
    assert doctor.exit_code(results) == 0
    info = [entry for entry in results if entry["level"] == "info"]
    assert any("docker0" in entry["reason"] and "unusable" in entry["reason"] for entry in info)
    assert {entry["check"] for entry in results} == {"ssh", "versions", "gpus", "network", "interfaces", "port", "runs"}


def test_an_unreachable_node():
    raws = cluster()
    raws["n1"] = {}
    results = judge(raws, unreachable={"n1": "Data could not be sent\nssh: connect to host 10.0.0.2 port 22: Connection refused"})
    (entry,) = [entry for entry in results if entry["host"] == "n1"]
    assert entry["check"] == "ssh" and not entry["ok"]
    assert entry["reason"].startswith("unreachable from the controller")
    assert doctor.exit_code(results) == 1


def test_ssh_connection_problem_names_the_pair():
    def down(raw):
        for attempt in raw["ssh"]:
            if attempt["item"]["peer"] == "n2":
                attempt.update(rc=255, stderr="ssh: connect to host 10.0.0.3 port 22: Connection refused")
    results = judge(cluster(n0=down))
    assert failures(results) == [("ssh", "n0")]
    reason = next(entry["reason"] for entry in results if not entry["ok"])
    assert "n0 -> n2" in reason and "connection problem" in reason


def test_a_missing_known_hosts_line_is_a_host_key_problem():
    def cut(raw):
        raw["known_hosts"] = raw["known_hosts"].replace(KNOWN[2] + "\n", "")
    results = judge(cluster(n1=cut))
    assert failures(results) == [("ssh", "n1")]
    entry = next(entry for entry in results if not entry["ok"])
    assert "host key problem" in entry["reason"] and "ssh-ed25519 key of n2" in entry["reason"]
    assert "known_hosts" in entry["fix"]


def test_a_refused_key_on_the_launch_node_fails_but_not_on_the_others():
    def refused(raw):
        raw["ssh"][0].update(rc=255, stderr="torchfleet@x: Permission denied (publickey).")
    assert failures(judge(cluster(n0=refused))) == [("ssh", "n0")]


def test_a_changed_package_names_the_odd_node():
    def changed(raw):
        raw["env"] = dict(LOCK_ENV, packages={"torch": "2.13.0+cpu", "numpy": "2.3.0"}, fingerprint="e" * 64,
                          drift=["numpy 2.3.0 installed (spec: 2.4.6)"])
    results = judge(cluster(n2=changed))
    assert failures(results) == [("versions", "n2")]
    reason = next(entry["reason"] for entry in results if not entry["ok"])
    assert "n2 differs from n0" in reason and "numpy 2.3.0 (n0 has 2.4.6)" in reason


def test_a_different_open_mpi_and_a_missing_nccl():
    def old_mpi(raw):
        raw["mpirun"] = {"rc": 0, "stdout": "mpirun (Open MPI) 4.1.2\n"}
        raw["nccl"] = {"msg": "no NCCL wheel (nvidia-nccl-*) in the environment of /opt/e/bin/python"}
    results = judge(cluster(n1=old_mpi))
    reason = next(entry["reason"] for entry in results if not entry["ok"])
    assert "Open MPI 4.1.2 (n0 has 4.1.4)" in reason and "no NCCL wheel (nvidia-nccl-*)" in reason


def test_mpich_alone_is_read_from_its_mpiexec_and_compared():
    hydra = "HYDRA build details:\n    Version:                                 4.0.2\n"

    def mpich(raw):
        raw["mpirun"] = {"rc": 0, "stdout": hydra}

    def other(raw):
        raw["mpirun"] = {"rc": 0, "stdout": hydra.replace("4.0.2", "4.1.2")}
    results = judge(cluster(n0=mpich, n1=mpich, n2=mpich))
    assert failures(results) == [] and any("MPICH 4.0.2" in entry["reason"] for entry in results)
    results = judge(cluster(n0=mpich, n1=mpich, n2=other))
    reason = next(entry["reason"] for entry in results if not entry["ok"])
    assert "MPICH 4.1.2 (n0 has 4.0.2)" in reason


def test_gpus_differ_or_busy():
    def four(raw):
        raw["gpus"] = {"rc": 0, "stdout": "GPU-a\nGPU-b\nGPU-c\nGPU-d\n"}
        raw["gpu_apps"] = {"rc": 0, "stdout": ""}

    def busy(raw):
        four(raw)
        raw["gpu_apps"] = {"rc": 0, "stdout": "4242\n"}

    def two(raw):
        raw["gpus"] = {"rc": 0, "stdout": "GPU-a\nGPU-b\n"}
        raw["gpu_apps"] = {"rc": 0, "stdout": ""}
    results = judge(cluster(n0=four, n1=busy, n2=two))
    assert failures(results) == [("gpus", "n1"), ("gpus", "n2")]
    reasons = {entry["host"]: entry["reason"] for entry in results if not entry["ok"]}
    assert "4242" in reasons["n1"] and "2 GPUs, the head n0 has 4" in reasons["n2"]


def test_network_interface_gone_or_head_unreachable():
    def gone(raw):
        raw["cluster_net"] = {"interface": "ib0", "address": "192.168.1.2"}

    def cut_off(raw):
        probe = raw["probe"]
        probe["connect"]["(head)"] = {"ok": False, "error": "No route to host"}
    results = judge(cluster(n1=gone, n2=cut_off))
    assert ("network", "n1") in failures(results) and ("network", "n2") in failures(results)
    reasons = {entry["host"]: entry["reason"] for entry in results if entry["check"] == "network"}
    assert "ib0 is gone" in reasons["n1"] and "No route to host" in reasons["n2"]


def test_port_taken_and_stale_runs():
    def taken(raw):
        probe = raw["probe"]
        probe["port"] = {"in_use": True, "holders": ["pid 7 (python3 -m http.server 29500)"]}

    def stale(raw):
        raw["runs"] = {"runs": [{"run_id": "tf-old", "pids": [11, 12]}]}
    results = judge(cluster(n0=taken, n2=stale))
    assert failures(results) == [("port", "n0"), ("runs", "n2")]
    reasons = {entry["check"]: entry["reason"] for entry in results if not entry["ok"]}
    assert "29500 is taken on the head by pid 7" in reasons["port"]
    assert "tf-old (pids 11, 12)" in reasons["runs"]


def test_an_unusable_cluster_interface_fails():
    def same(raw):
        probe = raw["probe"]
        probe["interfaces"]["eth0"] = "10.0.0.1"
    results = judge(cluster(n1=same))
    assert ("interfaces", "all") in failures(results)


def test_bad_input():
    with pytest.raises(Exception):
        doctor_results(["n0"], head="n0")


def test_torchft_is_judged_only_where_it_was_asked_for():
    def imports(raw):
        raw["torchft"] = {"rc": 0, "stdout": "0.2.0\n", "stderr": ""}

    def skipped(raw):
        raw["torchft"] = {"skipped": True}
    results = judge(cluster(n0=imports, n1=skipped))
    assert failures(results) == []
    (entry,) = [entry for entry in results if entry["check"] == "torchft"]
    assert entry["host"] == "n0" and entry["ok"]
    assert entry["reason"] == "torchft 0.2.0 imports in the environment, torchft_lighthouse beside it"


@pytest.mark.parametrize("found, said", [
    ({"rc": 1, "stdout": "", "stderr": "Traceback (most recent call last):\n"
                                       "ModuleNotFoundError: No module named 'torchft'\n"},
     "ModuleNotFoundError: No module named 'torchft'"),
    ({"rc": 1, "stdout": "", "stderr": "/opt/torchfleet/envs/torchfleet/bin/torchft_lighthouse is missing\n"},
     "torchft_lighthouse is missing"),
    ({"rc": None, "msg": "[Errno 2] No such file or directory: b'/opt/torchfleet/envs/torchfleet/bin/python'"},
     "No such file or directory"),
])
def test_torchft_missing_names_the_node_and_the_fix(found, said):
    def broken(raw):
        raw["torchft"] = found

    def imports(raw):
        raw["torchft"] = {"rc": 0, "stdout": "0.2.0\n"}
    results = judge(cluster(n0=imports, n1=imports, n2=broken))
    assert failures(results) == [("torchft", "n2")]
    entry = next(entry for entry in results if not entry["ok"])
    assert entry["reason"].startswith("torchft does not import in the Python environment (") and said in entry["reason"]
    assert entry["fix"].startswith("run setup.yml -e fault_tolerance=torchft") and "n2 included" in entry["fix"]
    assert doctor.exit_code(results) == 1


def test_an_unreachable_node_gets_no_torchft_result():
    raws = cluster()
    raws["n1"] = {"torchft": {"rc": 1, "stderr": "x"}}
    assert not [entry for entry in judge(raws) if entry["check"] == "torchft"]
