"""The launch option table and the one resolution of a request (module_utils/_launch_request.py)."""

import json

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_request as lr
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_plan import DEFAULT_PORT, Node, render

NODES = [{"name": "n0", "address": "10.0.0.1", "slots": 2, "interface": "eth0"},
         {"name": "n1", "address": "10.0.0.2", "slots": 2, "interface": "eth0"}]


def test_every_option_is_named_once_and_typed():
    names = [option.name for option in lr.OPTIONS]
    assert len(names) == len(set(names))
    roles = [option.role_name for option in lr.OPTIONS if option.role_name]
    assert len(roles) == len(set(roles)) and all(name.startswith("launch_") for name in roles)
    assert all(option.type in ("str", "int", "bool", "list", "dict", "path", "raw") for option in lr.OPTIONS)


def test_the_module_spec_and_the_role_take_their_defaults_from_the_table():
    spec = lr.argument_spec()
    assert spec["master_port"] == {"type": "int", "default": DEFAULT_PORT}
    assert spec["env_secrets"]["no_log"] is True and spec["env_pass"]["no_log"] is False
    assert "files" not in spec  # the role's alone: the module gets file_contents
    role = lr.role_options()
    assert role["launch_master_port"] == ({"type": "raw", "default": DEFAULT_PORT,
                                           "description": lr.BY_NAME["master_port"].doc}, DEFAULT_PORT)
    # A computed default is the role's alone: the spec declares none.
    entry, default = role["launch_log_dir"]
    assert "default" not in entry and default == "{{ launch_workdir }}/runs"
    assert lr.short_names()["cluster_user_name"] == ["launch_user"]


def test_variables_are_typed_and_the_role_name_wins_over_the_short_one():
    request = lr.from_variables({"master_port": "29400", "launch_master_port": "29401", "tree_spawn": "yes",
                                 "env_pass": "A, B", "nproc_per_node": "auto", "unrelated": 1})
    assert request == {"master_port": 29401, "tree_spawn": True, "env_pass": ["A", "B"], "nproc_per_node": "auto"}
    with pytest.raises(lr.RequestError, match="master_port must be a number, got 'abc'"):
        lr.from_variables({"master_port": "abc"})
    with pytest.raises(lr.RequestError, match="env_set must be a mapping"):
        lr.from_variables({"env_set": "A=1"})


def test_resolve_fills_the_table_defaults_and_renders():
    plan = lr.resolve({"head": "n0", "script": "/s/train.py"}, NODES, run_id="tf-1", run_dir="/r/tf-1")
    assert (plan.port, plan.mode, plan.silent_node_timeout, plan.tree_spawn) == (DEFAULT_PORT, "torchrun", 120, False)
    assert (plan.hostfile_path, plan.log_dir, plan.node_log_dir) == ("/r/tf-1/hostfile", "/r/tf-1/ranks", "/r/tf-1/workers")
    assert plan.nodes[0] == Node("n0", "10.0.0.1", 2, "eth0")
    assert render(plan).world_size == 4


def test_the_module_refuses_what_slurm_cannot_run_and_rides_ssh_only_where_mpirun_uses_it():
    assert lr.module_refusal({"scheduler": "slurm", "mode": "mpich"}).startswith("scheduler=slurm runs Open MPI")
    assert "tree_spawn" in lr.module_refusal({"scheduler": "slurm", "tree_spawn": True})
    assert lr.module_refusal({"scheduler": "none", "tree_spawn": True}) is None
    assert lr.head_reaches_nodes({"nodes": NODES})
    for change in ({"tree_spawn": True}, {"mode": "mpich"}, {"scheduler": "slurm"}, {"check_nodes": False},
                   {"nodes": NODES[:1]}):
        assert not lr.head_reaches_nodes({"nodes": NODES, **change})


@pytest.mark.parametrize("restart, nodes, mode, scheduler, said", [
    ({"max_restarts": "-1"}, 3, "torchrun", "none", "max_restarts is -1: give 0 or more."),
    ({"max_restarts": "two"}, 3, "torchrun", "none", "max_restarts is 'two': give a whole number"),
    ({"min_nodes": 4}, 3, "torchrun", "none", "min_nodes is 4, above the run's 3 nodes: give at most 3"),
    ({"restart_wait": -5}, 3, "torchrun", "none", "restart_wait is -5: give 0 or more."),
    ({"final_exit_codes": ["x"]}, 3, "torchrun", "none", "final_exit_codes is ['x']: give a list of exit codes"),
    ({"max_restarts": 2}, 3, "torchrun", "pbs", "which scheduler=pbs does not use"),
    ({"max_restarts": 2}, 3, "mpich", "none", "which mode mpich does not use"),
    ({"max_restarts": 1, "spare_nodes": 3}, 3, "torchrun", "none", "the head is never a spare: give at most 2"),
    ({"spare_nodes": 1}, 3, "torchrun", "none", "spare_nodes is 1, but max_restarts is 0"),
    ({"max_restarts": 1, "spare_nodes": 1}, 3, "torchrun", "slurm", "spare_nodes is 1 under Slurm"),
    ({"max_restarts": 1, "spare_nodes": 1, "min_nodes": 3}, 3, "torchrun", "none",
     "min_nodes is 3, above the run's 2 nodes besides its spares: give at most 2"),
    ({"rejoin_after": "soon"}, 3, "torchrun", "none", "rejoin_after is 'soon': give a whole number"),
])
def test_bad_restart_options_name_the_variable_value_and_fix(restart, nodes, mode, scheduler, said):
    found = lr.restart_problems(restart, nodes, mode, scheduler)
    assert len(found) == 1 and said in found[0], found


def test_restarts_under_slurm_need_the_heads_ssh_to_the_nodes():
    assert lr.restart_problems({"max_restarts": 2}, 3, "torchrun", "slurm") == []
    found = lr.restart_problems({"max_restarts": 2}, 3, "torchrun", "slurm", check_nodes=False)
    assert len(found) == 1 and "check_nodes false" in found[0] and "set check_nodes true" in found[0], found


def test_good_restart_options_pass():
    assert lr.restart_problems({"max_restarts": "2", "min_nodes": "2", "restart_wait": "60",
                                "final_exit_codes": [2, "3"]}, 3, "torchrun", "none") == []
    assert lr.restart_problems({}, 1, "rank", "slurm") == []  # no restarts asked: nothing to refuse


def test_which_ends_a_restart_can_help():
    from ansible_collections.torchfleet.cluster.plugins.module_utils._head.attempts import restart_cause
    lost = {"lost_nodes": {"n2": "2026-11-25T10:00:00+00:00"}, "failed_rank": 1, "failed_exit_code": 1}
    assert restart_cause("failed", lost, [], [], []) == "n2 stopped answering at 2026-11-25T10:00:00+00:00"
    rank = {"failed_rank": 3, "failed_host": "n1", "failed_exit_code": 137}
    assert restart_cause("failed", rank, [], [], []) == "rank 3 on n1 exited with code 137"
    assert restart_cause("failed", rank, [], [], [137]) is None  # a code the script calls final
    assert restart_cause("failed", {"rc": 1}, [], [], []) == "the launcher exited with code 1"
    for state in ("succeeded", "stopped", "timed_out"):
        assert restart_cause(state, rank, [], [], []) is None
    assert restart_cause("failed", rank, ["n2"], [], []) is None  # ranks never started: not a restart
    assert restart_cause("failed", rank, [], [{"pid": 9}], []) is None  # survivors of SIGKILL


def test_a_plan_survives_its_json_form_for_a_restart():
    from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_plan as lp
    plan = lp.Plan(nodes=(lp.Node("a", "10.0.0.1", 2, "eth0"), lp.Node("b", "10.0.0.2", 2, "eth0")), head="a",
                   script="/s/train.py", run_id="tf-1", hostfile_path="/r/hostfile", script_args=("--x", "1"),
                   env_set={"A": "1"}, env_pass=("PATH",), mpirun_extra_args=("--mca", "x", "y"))
    again = lp.plan_from_dict(json.loads(json.dumps(lp.plan_to_dict(plan))))
    assert again == plan and lp.render(again).argv == lp.render(plan).argv
