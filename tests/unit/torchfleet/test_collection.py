"""torchfleet/collection.py: where the collection is (a checkout's .collections, or the wheel's
copy), the state directory, and the collection's module_utils imported by name."""

import sys
from pathlib import Path

import pytest

from torchfleet import collection

REPO = Path(__file__).resolve().parents[3]


def test_this_checkout_links_its_collection():
    assert collection.CHECKOUT == REPO and collection.PACKAGE == REPO / "torchfleet"
    assert collection.checkout() == REPO
    assert collection.collections_path() == REPO / ".collections"
    assert collection.collection_root() == REPO / ".collections/ansible_collections/torchfleet/cluster"
    assert (collection.collection_root() / "galaxy.yml").is_file()


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """The package as if installed under tmp_path/site/torchfleet."""
    package = tmp_path / "site" / "torchfleet"
    package.mkdir(parents=True)
    monkeypatch.setattr(collection, "PACKAGE", package)
    monkeypatch.setattr(collection, "CHECKOUT", package.parent)
    return package


def test_an_installed_wheel_uses_its_own_copy(elsewhere):
    assert collection.checkout() is None
    assert collection.collections_path() == elsewhere / "collection"
    assert collection.collection_root() == elsewhere / "collection/ansible_collections/torchfleet/cluster"


def test_a_checkout_needs_both_galaxy_yml_and_the_linked_collection(elsewhere):
    root = elsewhere.parent
    (root / "galaxy.yml").write_text("namespace: torchfleet\n")
    assert collection.checkout() is None  # no .collections link yet
    (root / ".collections/ansible_collections/torchfleet/cluster").mkdir(parents=True)
    assert collection.checkout() == root
    assert collection.collections_path() == root / ".collections"
    (root / "galaxy.yml").unlink()
    assert collection.checkout() is None


def test_state_home_follows_xdg_else_the_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert collection.state_home() == tmp_path / "state" / "torchfleet"
    monkeypatch.setenv("XDG_STATE_HOME", "")  # empty: unset, as the XDG spec reads it
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert collection.state_home() == tmp_path / "home/.local/state/torchfleet"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert collection.state_home() == tmp_path / "home/.local/state/torchfleet"


def test_plugin_and_module_utils_import_the_collections_modules_once_on_the_path(monkeypatch):
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if entry != str(REPO / ".collections")])
    hostfile = collection.plugin_util("_hostfile")
    assert hostfile.__name__ == "ansible_collections.torchfleet.cluster.plugins.plugin_utils._hostfile"
    assert sys.path[0] == str(REPO / ".collections")
    assert Path(hostfile.__file__).resolve().is_relative_to(REPO / "plugins/plugin_utils")
    assert collection.plugin_util("_hostfile") is hostfile
    options = collection.module_util("_launch_options")
    assert Path(options.__file__).resolve().is_relative_to(REPO / "plugins/module_utils")
    assert sys.path.count(str(REPO / ".collections")) == 1


def test_module_util_of_a_missing_name_raises():
    with pytest.raises(ModuleNotFoundError):
        collection.module_util("_no_such_util")
