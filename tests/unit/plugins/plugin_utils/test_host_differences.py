"""_host_differences.py: how each node's values differ from the first node's, in words; and the
filter host_differences that hands it to the playbooks."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.torchfleet.cluster.plugins.filter.host_differences import FilterModule
from ansible_collections.torchfleet.cluster.plugins.plugin_utils._host_differences import host_differences


def test_host_differences_name_nodes_and_packages():
    found = host_differences({
        "node0": {"numpy": "2.4.6", "torch": "2.13.0", "(python)": "3.11.2"},
        "node1": {"numpy": "2.4.6", "torch": "2.13.0", "(python)": "3.11.2"},
        "node2": {"numpy": "1.26.4", "torch": "2.13.0", "requests": "2.32", "(python)": "3.11.2"},
        "node3": {"torch": "2.13.0", "(python)": "3.11.9"},
    })
    assert found == [
        "node2 differs from node0: numpy 1.26.4 (node0 has 2.4.6), requests 2.32 extra (node0 has none).",
        "node3 differs from node0: (python) 3.11.9 (node0 has 3.11.2), numpy missing (node0 has 2.4.6).",
    ]


def test_host_differences_of_identical_nodes_is_empty():
    assert host_differences({"a": {"x": "1"}, "b": {"x": "1"}}) == []
    assert host_differences({}) == []
    assert host_differences({"alone": {"x": "1"}}) == []


def test_values_are_compared_as_text():
    assert host_differences({"a": {"nccl": 2}, "b": {"nccl": "2"}}) == []
    assert host_differences({"a": {"nccl": 2}, "b": {"nccl": "2.0"}}) == ["b differs from a: nccl 2.0 (a has 2)."]


def test_a_node_without_values_is_compared_as_empty():
    assert host_differences({"a": {"x": "1"}, "b": None}) == ["b differs from a: x missing (a has 1)."]
    assert host_differences({"a": None, "b": {"x": "1"}}) == ["b differs from a: x 1 extra (a has none)."]
    assert host_differences({"a": None, "b": {}}) == []


def test_the_first_node_in_the_mappings_order_is_the_reference():
    values = {"z": {"v": "2"}, "a": {"v": "1"}, "m": {"v": "2"}}
    assert host_differences(values) == ["a differs from z: v 1 (z has 2)."]


@pytest.mark.parametrize("given", [["a", "b"], None, "a"])
def test_anything_but_a_mapping_is_refused(given):
    with pytest.raises(TypeError, match="expects a mapping of node names to mappings"):
        host_differences(given)


def test_the_filter_hands_it_on_and_says_why_as_ansible_does():
    found = FilterModule().filters()["host_differences"]
    assert found({"a": {"x": "1"}, "b": {"x": "2"}}) == ["b differs from a: x 2 (a has 1)."]
    with pytest.raises(AnsibleFilterError, match="expects a mapping"):
        found(["a"])
