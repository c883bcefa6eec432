"""The inventory's checks (filter inventory_problems); the playbook path of each message is tested
against containers in tests/integration/test_bad_input.py and test_playbooks.py."""

from ansible_collections.torchfleet.cluster.plugins.filter.inventory_problems import inventory_problems


def test_a_good_group_has_no_problem():
    assert inventory_problems(["a", "b"], "cluster", "a", ["10.0.0.1", "10.0.0.2"]) == []


def test_an_empty_group_is_said_alone():
    (problem,) = inventory_problems([], "gpus", "", [])
    assert problem.startswith("The inventory has no hosts in group 'gpus'. List your nodes under 'gpus:'")


def test_every_other_problem_is_named_at_once():
    problems = inventory_problems(["a", "b", "c", "d"], "cluster", "zz", ["10.0.0.1", "10.0.0.1", "", "c"])
    assert problems == [
        "torchfleet_head is 'zz', which is not in group 'cluster' (a, b, c, d). Set torchfleet_head to one "
        "of those hosts.",
        "A machine is listed more than once in group 'cluster': a and b are both 10.0.0.1; c and d are both c; "
        "keep one name per machine."]
