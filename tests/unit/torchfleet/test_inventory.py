"""torchfleet/inventory.py: the head and the training account, as the inventory names them."""

import json
import os

import pytest

from torchfleet import inventory


def test_head_account_reads_head_account_and_log_dir():
    hostvars = {"a": {"torchfleet_head": "b"}, "b": {}}
    assert inventory.head_account(["a", "b"], hostvars, {}) == ("b", "torchfleet", "~torchfleet/torchfleet/runs")
    head, user, log_dir = inventory.head_account(["a", "b"], hostvars, {"log_dir": "/scratch/runs", "cluster_user_name": "ml"})
    assert (user, log_dir) == ("ml", "/scratch/runs")
    with pytest.raises(inventory.InventoryError, match="torchfleet_head 'c'"):
        inventory.head_account(["a"], {"a": {"torchfleet_head": "c"}}, {})


def test_read_facts_takes_the_cache_file_written_last(tmp_path):
    plain, enveloped = tmp_path / "node0", tmp_path / "s1_node0"
    enveloped.write_text(json.dumps({"__payload__": json.dumps(
        {"preflight_gpu_count": {"value": 8, "tags": [], "__ansible_type": "_AnsibleTaggedInt"}})}))
    os.utime(enveloped, (1, 1))
    plain.write_text(json.dumps({"preflight_gpu_count": 4}))
    assert inventory.read_facts(tmp_path, "node0") == {"preflight_gpu_count": 4}
    os.utime(plain, (0, 0))  # ansible.builtin.jsonfile's file is the newer: a user's own setting wrote it
    assert inventory.read_facts(tmp_path, "node0") == {"preflight_gpu_count": 8}
    plain.write_text("{not json")
    assert inventory.read_facts(tmp_path, "node0") == {"preflight_gpu_count": 8}
    assert inventory.read_facts(tmp_path, "node1") is None
