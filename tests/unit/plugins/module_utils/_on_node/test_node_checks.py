"""node_checks.py: what the head makes of a node's answer to its checks."""


def test_a_changed_cluster_interface_is_named_with_what_setup_recorded():
    from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.node_checks import interface_change
    from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import Node
    node = Node("n2", "10.0.0.3", 1, "eth0")
    assert interface_change(node, {"lo": ["127.0.0.1"], "eth0": ["10.0.0.3"]}) is None
    assert interface_change(node, None) is None  # the node could not tell
    assert interface_change(Node("n2", "10.0.0.3", 1), {}) is None  # one node: no interface to check
    assert interface_change(node, {"eth1": ["10.0.0.3"]}) == (
        "n2: setup recorded eth0 with 10.0.0.3; the node now has no interface eth0, and 10.0.0.3 on eth1")
    assert interface_change(node, {"eth0": [], "ib0": ["10.0.0.3"]}) == (
        "n2: setup recorded eth0 with 10.0.0.3; the node now has eth0 with no IPv4 address, and 10.0.0.3 on ib0")
    assert interface_change(Node("n2", "n2.cluster", 1, "eth0"), {"eth0": []}) is None  # a name: the interface alone
