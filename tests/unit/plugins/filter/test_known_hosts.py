"""The cluster's known_hosts lines: every name and address of a node, its own keys."""

from ansible_collections.torchfleet.cluster.plugins.filter.known_hosts import known_hosts


def node(name, address, **keys):
    facts = {"hostname": name, "fqdn": f"{name}.example"}
    for key_type, key in keys.items():
        facts[f"ssh_host_key_{key_type}_public"] = key
        facts[f"ssh_host_key_{key_type}_public_keytype"] = f"ssh-{key_type}"
    return {"inventory_hostname": name, "ansible_facts": facts, "preflight_net": {"address": address},
            "ansible_host": address}


def test_every_name_and_address_once_per_key():
    lines = known_hosts([node("n0", "10.0.0.1", ed25519="AAAA0", rsa="BBBB0"), node("n1", "10.0.0.2", ed25519="AAAA1")])
    assert lines == ["n0,n0.example,10.0.0.1 ssh-ed25519 AAAA0", "n0,n0.example,10.0.0.1 ssh-rsa BBBB0",
                     "n1,n1.example,10.0.0.2 ssh-ed25519 AAAA1"]


def test_a_node_without_gathered_keys_gives_no_line():
    assert known_hosts([{"inventory_hostname": "n2"}]) == []
