"""The launch request's checks that the module makes too: Slurm's conflicts and the restart options
(module_utils/_launch_checks.py; problems() is tested through its filter, tests/unit/plugins/filter)."""

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_checks as lc
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_resolution import LaunchRequest


def test_the_module_refuses_what_slurm_cannot_run():
    request = LaunchRequest.of
    assert lc.module_refusal(request({"scheduler": "slurm", "mode": "mpich"})).startswith("scheduler=slurm runs Open MPI")
    assert "tree_spawn" in lc.module_refusal(request({"scheduler": "slurm", "tree_spawn": True}))
    assert lc.module_refusal(request({"scheduler": "none", "tree_spawn": True})) is None


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
    found = lc.restart_problems(restart, nodes, mode, scheduler)
    assert len(found) == 1 and said in found[0], found


def test_restarts_under_slurm_need_the_heads_ssh_to_the_nodes():
    assert lc.restart_problems({"max_restarts": 2}, 3, "torchrun", "slurm") == []
    found = lc.restart_problems({"max_restarts": 2}, 3, "torchrun", "slurm", check_nodes=False)
    assert len(found) == 1 and "check_nodes false" in found[0] and "set check_nodes true" in found[0], found


def test_a_spare_needs_max_restarts_unless_torchft_runs_a_lost_nodes_group_on_it():
    assert "but max_restarts is 0" in lc.restart_problems({"spare_nodes": 1}, 3, "torchrun", "none")[0]
    assert lc.restart_problems({"spare_nodes": 1}, 3, "torchrun", "none", fault_tolerance="torchft") == []


def test_good_restart_options_pass():
    assert lc.restart_problems({"max_restarts": "2", "min_nodes": "2", "restart_wait": "60",
                                "final_exit_codes": [2, "3"]}, 3, "torchrun", "none") == []
    assert lc.restart_problems({}, 1, "rank", "slurm") == []  # no restarts asked: nothing to refuse


@pytest.mark.parametrize("value, refused", [("auto", False), (None, False), ("0", False), (0, False), ("10", False),
                                            (600, False), ("9", True), ("-5", True), ("never", True), ("1.5", True)])
def test_a_hang_timeout_is_auto_zero_or_ten_seconds_or_more(value, refused):
    said = lc.hang_problem(value)
    assert bool(said) == refused
    if refused:
        assert f"hang_timeout is '{value}'" in said and "auto" in said and "10 or more" in said
    assert bool(lc.module_refusal(LaunchRequest.of({"hang_timeout": value}))) == refused


@pytest.mark.parametrize("value, refused", [(1, True), (3, True), ("2", True), (0, False), (4, False), (30, False)])
def test_a_heartbeat_timeout_below_the_silence_that_makes_a_node_silent_is_refused_naming_the_floor(value, refused):
    said = lc.heartbeat_problem(value)
    assert bool(said) == refused
    if refused:
        assert f"heartbeat_timeout is {int(value)}" in said and "at least 4 s" in said and "or 0" in said
    assert bool(lc.module_refusal(LaunchRequest.of({"heartbeat_timeout": value}))) == refused
