"""The `project` fixture of the CLI's tests: a script, an inventory and setup's cached facts."""

import pytest

from cli_helpers import write_facts, write_inventory


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A directory with a script, a two-node inventory and a fact cache, as after setup."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / ".cache" / "facts"))
    (tmp_path / "train.py").write_text("print('hi')\n")
    write_inventory(tmp_path / "hosts.yml",
                    {"gpu01": {"ansible_host": "192.0.2.11"}, "gpu02": {"ansible_host": "192.0.2.12"}},
                    torchfleet_head="gpu01", cluster_user_name="trainer")
    cache = tmp_path / ".cache" / "facts"
    cache.mkdir(parents=True)
    write_facts(cache, "gpu01", "10.9.0.11", 4,
                cluster_user_account={"name": "trainer", "home": "/home/trainer",
                                      "scripts": "/home/trainer/torchfleet/scripts"})
    write_facts(cache, "gpu02", "10.9.0.12", 4, enveloped=True)
    return tmp_path
