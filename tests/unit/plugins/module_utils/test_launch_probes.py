"""_launch_probes.py: the launch module's questions to the nodes before a start (preflight), the
files it sends them, and whether a started run's ranks run everywhere. The nodes' answers are
canned (probe_nodes and nodes_without_ranks are stand-ins); what is tested is what the launch makes
of them: which start it refuses, and how it says so."""

import socket
from types import SimpleNamespace

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_probes as launch_probes
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_request import LaunchRequest


class Refused(Exception):
    def __init__(self, result):
        super().__init__(result["msg"])
        self.result = result


class _Module:
    """The little of AnsibleModule the probes read; fail_json raises Refused."""

    def __init__(self, check_mode=False, **params):
        self.check_mode = check_mode
        self.params = {"check_nodes": True, "share_nodes": False, "scheduler": "none", "expect_packages": {},
                       **params}
        self.warnings, self.bins = [], []

    def get_bin_path(self, name, required=False):
        self.bins.append((name, required))
        return f"/usr/bin/{name}"

    def fail_json(self, **result):
        raise Refused(result)

    def warn(self, text):
        self.warnings.append(text)


def node(name, address, interface="eth0"):
    return SimpleNamespace(name=name, address=address, interface=interface, slots=2)


PLAN = SimpleNamespace(run_id="r1", request=SimpleNamespace(head="n0", python="/opt/env/bin/python", master_port=29500),
                       nodes=[node("n0", "10.0.0.1"), node("n1", "10.0.0.2"), node("n2", "10.0.0.3")])


def answer(**changes):
    return {"stale": [], "runs": [], "announced": True, "interfaces": None, **changes}


# --- the head's address, port and run id -------------------------------------------------------

def test_holds_address_tells_this_machines_addresses_from_others(monkeypatch):
    assert launch_probes.holds_address("127.0.0.1") is True
    assert launch_probes.holds_address("192.0.2.1") is False  # TEST-NET-1: never this machine's

    def unknown(*args, **kwargs):
        raise socket.gaierror("Name or service not known")
    monkeypatch.setattr(launch_probes.socket, "getaddrinfo", unknown)
    assert launch_probes.holds_address("no-such-node") is False


@pytest.fixture
def head_state(monkeypatch):
    state = SimpleNamespace(address=True, in_use=False, holders=[])
    monkeypatch.setattr(launch_probes, "holds_address", lambda address: state.address)
    monkeypatch.setattr(launch_probes, "port_in_use", lambda port: state.in_use)
    monkeypatch.setattr(launch_probes, "port_holders", lambda port: state.holders)
    return state


def test_head_preflight_passes_a_free_head(head_state, tmp_path):
    launch_probes.head_preflight(_Module(), PLAN, str(tmp_path / "r1"), PLAN.nodes[0])


def test_head_preflight_refuses_a_machine_without_the_heads_address(head_state, tmp_path):
    head_state.address = False
    with pytest.raises(Refused, match=r"does not have the head's address 10.0.0.1 \(n0\).*delegate_to: n0"):
        launch_probes.head_preflight(_Module(), PLAN, str(tmp_path / "r1"), PLAN.nodes[0])


def test_head_preflight_refuses_a_taken_port_naming_its_holders_but_not_under_slurm(head_state, tmp_path):
    head_state.in_use, head_state.holders = True, ["pid 7 (python3 -m http.server)", "pid 8 (x)"]
    with pytest.raises(Refused) as refused:
        launch_probes.head_preflight(_Module(), PLAN, str(tmp_path / "r1"), PLAN.nodes[0])
    assert ("rendezvous port 29500 is already in use on the head n0 by pid 7 (python3 -m http.server), pid 8 (x)"
            in refused.value.result["msg"])
    assert refused.value.result["port_holders"] == head_state.holders
    head_state.holders = []
    with pytest.raises(Refused, match="already in use on the head n0; choose another port"):
        launch_probes.head_preflight(_Module(), PLAN, str(tmp_path / "r1"), PLAN.nodes[0])
    launch_probes.head_preflight(_Module(scheduler="slurm"), PLAN, str(tmp_path / "r1"), PLAN.nodes[0])


def test_head_preflight_refuses_a_run_id_used_before_even_as_a_dangling_link(head_state, tmp_path):
    (tmp_path / "r1").symlink_to(tmp_path / "gone")
    with pytest.raises(Refused, match="already exists: run id r1 was used before"):
        launch_probes.head_preflight(_Module(), PLAN, str(tmp_path / "r1"), PLAN.nodes[0])


def test_others_listed_groups_by_account_and_run():
    others = [{"node": "n1", "run_id": "b", "account": "ann", "state": "running", "started": "10:00", "world_size": 8},
              {"node": "n0", "run_id": "a", "account": "bob", "state": "starting"},
              {"node": "n2", "run_id": "b", "account": "ann", "state": "running", "started": "10:00", "world_size": 8}]
    assert launch_probes.others_listed(others) == (
        "run b of account ann (running, started 10:00, world size 8) on n1, n2; "
        "run a of account bob (starting, started ?, world size ?) on n0")


# --- every node before the start ---------------------------------------------------------------

@pytest.fixture
def nodes(monkeypatch):
    """The nodes' answers ({name: answer}); each request probe_nodes got is kept in `asked`."""
    state = SimpleNamespace(answers={name: answer() for name in ("n0", "n1", "n2")}, asked=[], head=[])

    def probe_nodes(nodes, head, ssh, python, requests, control_dir=None):
        state.asked.append({"nodes": [n.name for n in nodes], "head": head, "ssh": ssh, "python": python,
                            "requests": requests, "control_dir": control_dir})
        return {n.name: state.answers[n.name] for n in nodes}
    monkeypatch.setattr(launch_probes, "probe_nodes", probe_nodes)
    monkeypatch.setattr(launch_probes, "head_preflight", lambda module, plan, run_dir, head: state.head.append(head.name))
    return state


def preflight(module, **kwargs):
    # The plan's request is the module's parameters, typed, as the launch module makes it.
    request = LaunchRequest.of({"head": "n0", "python": "/opt/env/bin/python", **module.params})
    plan = SimpleNamespace(run_id=PLAN.run_id, request=request, nodes=PLAN.nodes)
    return launch_probes.preflight_nodes(module, plan, "/runs/r1", {"/s/train.py": "abc"}, **kwargs)


def test_a_clean_cluster_passes_and_names_the_stale_files(nodes):
    nodes.answers["n1"]["stale"] = ["/s/train.py"]
    module = _Module()
    entry = {"run_id": "r1", "account": "me"}
    assert preflight(module, control_dir="/tmp/tf-ssh-x", entry=entry) == ({"n1": ["/s/train.py"]}, [])
    (asked,) = nodes.asked
    assert asked["nodes"] == ["n0", "n1", "n2"] and asked["control_dir"] == "/tmp/tf-ssh-x"
    assert asked["requests"]["n1"] == {"expect": {"/s/train.py": "abc"}, "interfaces": True,
                                       "board": {"entry": entry, "share": False}}
    assert module.announced == ["n0", "n1", "n2"] and nodes.head == ["n0"]
    assert module.bins == [("ssh", True)] and module.warnings == []


def test_a_check_writes_no_board_entry_and_packages_are_asked_for(nodes):
    module = _Module(check_mode=True, expect_packages={"torch": "2.13.0"})
    preflight(module, entry={"run_id": "r1"})
    request = nodes.asked[0]["requests"]["n0"]
    assert request["board"]["entry"] is None
    assert request["packages"] == {"python": "/opt/env/bin/python", "expect": {"torch": "2.13.0"}}


def test_without_node_checks_only_the_head_is_asked_and_ssh_is_not_required(nodes):
    module = _Module(check_nodes=False)
    preflight(module)
    assert nodes.asked[0]["nodes"] == ["n0"] and module.bins == [("ssh", False)]
    assert nodes.asked[0]["requests"]["n0"]["interfaces"] is False


def test_nodes_ssh_cannot_reach_are_refused(nodes):
    nodes.answers["n2"] = {"error": "ssh: connect to host 10.0.0.3 port 22: No route to host"}
    with pytest.raises(Refused) as refused:
        preflight(_Module())
    assert refused.value.result["unreachable"] == ["n2"]
    assert ("the head n0 cannot reach n2 over ssh as the training account, as mpirun would "
            "(n2: ssh: connect to host 10.0.0.3 port 22: No route to host)") in refused.value.result["msg"]
    assert nodes.head == []  # refused before the head's own checks


def test_up_to_may_miss_unreachable_nodes_are_left_to_the_run_but_never_the_head(nodes):
    nodes.answers["n2"] = {"error": "timeout"}
    nodes.answers["n1"]["stale"] = ["/s/train.py"]
    module = _Module()
    assert preflight(module, may_miss=1) == ({"n1": ["/s/train.py"]}, ["n2"])
    assert module.announced == ["n0", "n1"]
    nodes.answers["n1"] = {"error": "timeout"}
    with pytest.raises(Refused, match="cannot reach n1, n2"):
        preflight(_Module(), may_miss=1)  # two lost: more than it may miss
    nodes.answers["n1"] = answer()
    nodes.answers["n0"] = {"error": "python3: not found"}
    with pytest.raises(Refused, match="cannot reach n0, n2"):
        preflight(_Module(), may_miss=2)


def test_a_run_still_alive_anywhere_is_refused(nodes):
    nodes.answers["n1"]["runs"] = [{"pid": 7, "run_id": "old"}, {"pid": 8, "run_id": "old"}]
    with pytest.raises(Refused) as refused:
        preflight(_Module())
    assert refused.value.result["runs"] == [{"node": "n1", "run_id": "old", "pids": [7, 8]}]
    assert "still alive on n1: old (pids 7, 8). Stop it first with ansible-playbook" in refused.value.result["msg"]


def test_another_accounts_run_is_refused_unless_the_nodes_are_shared(nodes):
    nodes.answers["n2"]["others"] = [{"run_id": "theirs", "account": "ann", "state": "running"}]
    with pytest.raises(Refused) as refused:
        preflight(_Module())
    assert refused.value.result["others"] == [{"node": "n2", "run_id": "theirs", "account": "ann", "state": "running"}]
    assert "run theirs of account ann (running, started ?, world size ?) on n2" in refused.value.result["msg"]
    preflight(_Module(share_nodes=True))
    preflight(_Module(scheduler="slurm"))  # Slurm shares the nodes out
    assert nodes.asked[-1]["requests"]["n0"]["board"]["share"] is True


def test_nodes_without_a_run_board_are_warned_of_once_there_is_an_entry(nodes):
    nodes.answers["n1"]["announced"] = False
    nodes.answers["n2"]["announced"] = False
    module = _Module()
    preflight(module)
    assert module.warnings == []  # no entry to write
    preflight(module, entry={"run_id": "r1"})
    assert module.announced == ["n0"]
    assert module.warnings == ["no run board on n1, n2 (set up by an older torchfleet): other accounts' launches "
                               "cannot see this run there. Run setup.yml again to make it"]


def test_a_cluster_interface_changed_since_setup_is_refused(nodes):
    nodes.answers["n1"]["interfaces"] = {"eth1": ["10.0.0.2"]}
    nodes.answers["n2"]["interfaces"] = {"eth0": ["10.0.0.3"]}
    with pytest.raises(Refused) as refused:
        preflight(_Module())
    assert refused.value.result["interface_changed"] == [
        "n1: setup recorded eth0 with 10.0.0.2; the node now has no interface eth0, and 10.0.0.2 on eth1"]


def test_a_drifted_environment_is_refused_naming_each_node(nodes):
    nodes.answers["n2"]["drift"] = ["numpy 2.3.0 installed (spec: 2.4.6)", "requests extra"]
    with pytest.raises(Refused) as refused:
        preflight(_Module())
    assert refused.value.result["drifted"] == {"n2": ["numpy 2.3.0 installed (spec: 2.4.6)", "requests extra"]}
    assert ("/opt/env/bin/python is no longer what setup installed, on n2: numpy 2.3.0 installed (spec: 2.4.6), "
            "requests extra") in refused.value.result["msg"]


# --- the files, and the ranks of a started run --------------------------------------------------

def test_send_files_writes_only_what_each_node_lacks(nodes):
    module = _Module()
    launch_probes.send_files(module, PLAN, {"/a": "QQ==", "/b": "Qg=="}, {"n1": ["/a", "/b"], "n2": ["/b"]}, control_dir="/c")
    (asked,) = nodes.asked
    assert asked["nodes"] == ["n1", "n2"] and asked["control_dir"] == "/c"
    assert asked["requests"] == {"n1": {"write": {"/a": "QQ==", "/b": "Qg=="}}, "n2": {"write": {"/b": "Qg=="}}}
    assert module.bins == [("ssh", True)]
    launch_probes.send_files(module, PLAN, {"/a": "QQ=="}, {"n0": ["/a"]})
    assert module.bins[-1] == ("ssh", False)  # the head alone: no ssh


def test_send_files_that_fail_refuse_the_start(nodes):
    nodes.answers["n2"] = {"error": "Permission denied"}
    with pytest.raises(Refused) as refused:
        launch_probes.send_files(_Module(), PLAN, {"/a": "QQ=="}, {"n1": ["/a"], "n2": ["/a"]})
    assert refused.value.result["msg"] == "could not put the script's files on n2: Permission denied; nothing was started"
    assert refused.value.result["stale_files"] == {"n1": ["/a"], "n2": ["/a"]}


@pytest.mark.parametrize("params, record_nodes, asked", [
    ({}, None, ["n0", "n1", "n2"]),
    ({}, ["n2", "n0"], ["n0", "n2"]),  # a restart's attempt on fewer nodes
    ({"check_nodes": False}, None, ["n0"]),
])
def test_ranks_started_asks_the_nodes_of_the_attempt(monkeypatch, params, record_nodes, asked):
    seen = {}

    def nodes_without_ranks(nodes, head, ssh, python, run_id, launchers, control_dir=None):
        seen.update(nodes=[n.name for n in nodes], run_id=run_id, launchers=launchers, control_dir=control_dir)
        return seen.get("without", [])
    monkeypatch.setattr(launch_probes, "nodes_without_ranks", nodes_without_ranks)
    record = SimpleNamespace(nodes=record_nodes, supervisor_pid=40, launcher_pid=41)
    assert launch_probes.ranks_started(_Module(**params), PLAN, record, "/c") is True
    assert seen == {"nodes": asked, "run_id": "r1", "launchers": {40, 41}, "control_dir": "/c"}
    seen["without"] = ["n1"]
    assert launch_probes.ranks_started(_Module(**params), PLAN, record, "/c") is False
