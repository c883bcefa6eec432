"""torchfleet/inventory.py: the head and the training account, as the inventory names them."""

import pytest

from torchfleet import inventory


def test_head_account_reads_head_account_and_log_dir():
    hostvars = {"a": {"torchfleet_head": "b"}, "b": {}}
    assert inventory.head_account(["a", "b"], hostvars, {}) == ("b", "torchfleet", "~torchfleet/torchfleet/runs")
    head, user, log_dir = inventory.head_account(["a", "b"], hostvars, {"log_dir": "/scratch/runs", "cluster_user_name": "ml"})
    assert (user, log_dir) == ("ml", "/scratch/runs")
    with pytest.raises(inventory.InventoryError, match="torchfleet_head 'c'"):
        inventory.head_account(["a"], {"a": {"torchfleet_head": "c"}}, {})
