"""The choice of the cluster interface from a node's gathered facts."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.torchfleet.cluster.plugins.filter.cluster_interface import pick_cluster_interface


def facts(default="eth0", **interfaces):
    """Gathered facts of a node: NAME="addr/prefix" or a list of them (first is primary)."""
    result = {"interfaces": list(interfaces), "default_ipv4": {"interface": default} if default else {}}
    for name, value in interfaces.items():
        addresses = [value] if isinstance(value, str) else value
        entries = []
        for cidr in addresses:
            address, prefix = cidr.split("/")
            mask = ".".join(str((0xFFFFFFFF << (32 - int(prefix)) >> s) & 0xFF) for s in (24, 16, 8, 0))
            entries.append({"address": address, "netmask": mask})
        key = name.replace("-", "_")
        result[key] = {"ipv4": entries[0]} if entries else {}
        if entries[1:]:
            result[key]["ipv4_secondaries"] = entries[1:]
    return result


DOCKER_HOST = dict(lo="127.0.0.1/8", docker0="172.17.0.1/16", veth0tf=[], eth0="172.18.0.2/16")


def test_inventory_address_wins_and_docker0_is_never_picked():
    picked = pick_cluster_interface(facts(**DOCKER_HOST), inventory_address="172.18.0.2")
    assert picked == {"interface": "eth0", "address": "172.18.0.2", "network": "172.18.0.0/16"}


def test_default_route_used_when_inventory_address_is_a_name():
    picked = pick_cluster_interface(facts(**DOCKER_HOST), inventory_address="gpu01.example")
    assert picked["interface"] == "eth0"


def test_default_route_through_docker0_is_refused_with_the_list():
    with pytest.raises(AnsibleFilterError, match=r"cannot tell which interface.*eth0 172\.18\.0\.2/16"):
        pick_cluster_interface(facts(default="docker0", **DOCKER_HOST), inventory_address="")


def test_only_loopback_and_bridges_left_is_an_error():
    nodes = facts(default="virbr0", lo="127.0.0.1/8", virbr0="192.168.122.1/24", **{"br-3f2a": "172.20.0.1/16"})
    with pytest.raises(AnsibleFilterError, match="usable interfaces: none"):
        pick_cluster_interface(nodes)


def test_network_selects_the_interface_on_it():
    multi = facts(lo="127.0.0.1/8", eth0="192.0.2.10/24", ib0="10.10.10.11/24", docker0="172.17.0.1/16")
    picked = pick_cluster_interface(multi, inventory_address="192.0.2.10", network="10.10.10.0/24")
    assert picked == {"interface": "ib0", "address": "10.10.10.11", "network": "10.10.10.0/24"}


def test_network_matches_a_secondary_address():
    node = facts(eth0=["192.0.2.10/24", "10.10.10.11/24"])
    assert pick_cluster_interface(node, network="10.10.10.0/24")["address"] == "10.10.10.11"


def test_network_with_no_interface_on_it_names_what_the_node_has():
    with pytest.raises(AnsibleFilterError, match=r"no usable interface is on the cluster network 10\.9\.0\.0/16.*eth0"):
        pick_cluster_interface(facts(**DOCKER_HOST), network="10.9.0.0/16")


def test_docker0_address_as_network_is_still_refused():
    with pytest.raises(AnsibleFilterError, match="no usable interface"):
        pick_cluster_interface(facts(**DOCKER_HOST), network="172.17.0.0/16")


def test_bad_cidr_says_how_to_write_it():
    with pytest.raises(AnsibleFilterError, match="not an IPv4 CIDR.*10.10.10.0/24"):
        pick_cluster_interface(facts(**DOCKER_HOST), network="eth0")


def test_interface_names_with_dashes_are_found():
    node = facts(default="enp3s0-1", **{"enp3s0-1": "10.0.0.5/24"})
    assert pick_cluster_interface(node)["interface"] == "enp3s0-1"


def test_a_node_without_network_facts_is_told_from_one_without_a_usable_interface():
    # A minimal image without `ip` (iproute2): Ansible gathers no interface at all (seen on a lent
    # GPU machine, docs/gpu.md), which is not the same as interfaces that are all excluded.
    with pytest.raises(AnsibleFilterError, match=r"gathered no network facts .* install iproute2"):
        pick_cluster_interface({"hostname": "gpu0"}, inventory_address="192.0.2.2")
