"""The one launch request: variables typed, defaults filled once, what run.json keeps of it
(module_utils/_launch_resolution.py); its plan: _on_node/test_launch_plan.py."""

import dataclasses
import json

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_resolution as lr
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import DEFAULT_PORT, Node, plan_for
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.renderer import render

NODES = [{"name": "n0", "address": "10.0.0.1", "slots": 2, "interface": "eth0"},
         {"name": "n1", "address": "10.0.0.2", "slots": 2, "interface": "eth0"}]


def test_variables_are_typed_and_the_role_name_wins_over_the_short_one():
    request = lr.from_variables({"master_port": "29400", "launch_master_port": "29401", "tree_spawn": "yes",
                                 "env_pass": "A, B", "nproc_per_node": "auto", "unrelated": 1})
    assert request == {"master_port": 29401, "tree_spawn": True, "env_pass": ["A", "B"], "nproc_per_node": "auto"}
    with pytest.raises(lr.RequestError, match="master_port must be a number, got 'abc'"):
        lr.from_variables({"master_port": "abc"})
    with pytest.raises(lr.RequestError, match="env_set must be a mapping"):
        lr.from_variables({"env_set": "A=1"})


def test_the_request_fills_the_table_defaults_once_and_its_plan_renders():
    request = lr.LaunchRequest.of({"head": "n0", "script": "/s/train.py", "nodes": NODES, "master_port": None,
                                   "user": "not a module option"})
    assert (request.master_port, request.max_restarts, request.env_pass) == (DEFAULT_PORT, 0, [])
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.max_restarts = 2
    plan = plan_for(request, NODES, run_id="tf-1", run_dir="/r/tf-1")
    assert (plan.request.master_port, plan.request.mode, plan.request.silent_node_timeout, plan.request.tree_spawn) == (DEFAULT_PORT, "torchrun", 120, False)
    assert (plan.hostfile_path, plan.log_dir, plan.node_log_dir) == ("/r/tf-1/hostfile", "/r/tf-1/ranks", "/r/tf-1/workers")
    assert plan.nodes[0] == Node("n0", "10.0.0.1", 2, "eth0")
    assert render(plan).world_size == 4


def test_mpirun_rides_the_heads_ssh_only_where_it_uses_it():
    assert lr.head_reaches_nodes(lr.LaunchRequest.of({"nodes": NODES}))
    for change in ({"tree_spawn": True}, {"mode": "mpich"}, {"scheduler": "slurm"}, {"check_nodes": False},
                   {"nodes": NODES[:1]}):
        assert not lr.head_reaches_nodes(lr.LaunchRequest.of({"nodes": NODES, **change}))


def test_run_json_keeps_the_request_without_its_secrets_or_files():
    request = lr.LaunchRequest.of({"nodes": NODES, "env_secrets": {"WANDB_API_KEY": "s3cret"},
                                   "file_contents": {"/s/train.py": "cHJpbnQoKQ=="}, "max_restarts": 2})
    kept = lr.stored(request).stored()
    assert kept["env_secrets"] == ["WANDB_API_KEY"] and "file_contents" not in kept
    assert "s3cret" not in json.dumps(kept) and kept["max_restarts"] == 2
    assert set(kept) == set(request.__dataclass_fields__) - {"file_contents"}
    back = lr.LaunchRequest.from_stored(json.loads(json.dumps(kept)))  # as the supervisor reads run.json
    assert isinstance(back, lr.LaunchRequest) and back == lr.stored(request)
    assert back.env_secrets == {"WANDB_API_KEY": "<redacted>"} and back.file_contents == {}


FACTS = {"python_env_python": "/opt/env/bin/python", "python_env_torchrun": "/opt/env/bin/torchrun",
         "openmpi_mpirun": "/usr/bin/mpirun.openmpi", "mpich_mpiexec": "/usr/bin/mpiexec.hydra",
         "mpich_found_launcher": "hydra", "python_env_installed": {"torch": "2.13.0"}}


def _resolved(facts=None, **given):
    given = {"mode": "torchrun", "user": "torchfleet", "script": "examples/train.py", "shared_storage": False,
             "script_dir": "~/torchfleet/scripts/", **given}
    return lr.resolved(FACTS if facts is None else facts, **given)


def test_the_launch_takes_the_heads_tools_from_setups_facts_and_copies_the_script_beside_the_others():
    assert _resolved() == {
        "script": "~/torchfleet/scripts/train.py", "chdir": "~/torchfleet/scripts", "python": "/opt/env/bin/python",
        "torchrun": "/opt/env/bin/torchrun", "launcher": "/usr/bin/mpirun.openmpi", "mpich_launcher": None,
        "allow_run_as_root": False, "check_nodes": True, "expect_packages": {"torch": "2.13.0"}}
    shared = _resolved(script="/shared/job/train.py", shared_storage="yes")  # -e gives text
    assert (shared["script"], shared["chdir"]) == ("/shared/job/train.py", "/shared/job")
    assert _resolved(user="root")["allow_run_as_root"] is True


def test_mpich_mode_takes_mpiexec_and_its_flavour_from_the_facts_unless_given_and_pals_checks_no_node():
    hydra = _resolved(mode="mpich")
    assert (hydra["launcher"], hydra["mpich_launcher"], hydra["check_nodes"]) == ("/usr/bin/mpiexec.hydra", "hydra", True)
    pals = _resolved(mode="mpich", mpich_launcher="pals", user="root")
    assert (pals["mpich_launcher"], pals["check_nodes"], pals["allow_run_as_root"]) == ("pals", False, False)
    assert _resolved(mode="rank", mpich_launcher="pals")["mpich_launcher"] is None  # mpich mode's alone


def test_without_facts_nothing_is_made_up():
    bare = _resolved(facts={})
    assert (bare["python"], bare["torchrun"], bare["launcher"], bare["expect_packages"]) == (None, None, None, {})
    assert _resolved(facts={**FACTS, "python_env_torchrun": ""})["torchrun"] is None  # python_env_engine=none
