"""Where the torchfleet.cluster collection is (a checkout's .collections, or the wheel's copy), and
its Python code imported as the package it is: ansible_collections.torchfleet.cluster."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CHECKOUT = PACKAGE.parent
PLUGINS = "ansible_collections.torchfleet.cluster.plugins"


def checkout() -> Path | None:
    """The checkout this package runs from (its collection linked in .collections); None when
    installed from the wheel."""
    linked = CHECKOUT / ".collections"
    if (CHECKOUT / "galaxy.yml").is_file() and (linked / "ansible_collections/torchfleet/cluster").is_dir():
        return CHECKOUT
    return None


def state_home() -> Path:
    """torchfleet's XDG state directory: what the command keeps between runs (local clusters'
    keys, the fact cache of an installed wheel)."""
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "torchfleet"


def collections_path() -> Path:
    """The directory to put in ANSIBLE_COLLECTIONS_PATH (it holds ansible_collections/)."""
    return CHECKOUT / ".collections" if checkout() else PACKAGE / "collection"


def collection_root() -> Path:
    return collections_path() / "ansible_collections" / "torchfleet" / "cluster"


def module_util(name: str):
    """One of the collection's module_utils that the controller shares with the module and the
    head (`_launch_options`, `_on_node.renderer`), imported by name."""
    _make_importable()
    return importlib.import_module(f"{PLUGINS}.module_utils.{name}")


def plugin_util(name: str):
    """One of the collection's plugin_utils, the controller's own code (`_hostfile`), by name."""
    _make_importable()
    return importlib.import_module(f"{PLUGINS}.plugin_utils.{name}")


def _make_importable() -> None:
    """Put the collection first where `import ansible_collections...` looks: ansible_collections
    is a namespace package, so this directory joins the others on sys.path (the `ansible`
    package's collections in site-packages). The CLI never installs ansible-core's own collection
    loader in its process (playbooks run in ansible-runner's subprocesses), so sys.path is enough."""
    path = str(collections_path())
    if path not in sys.path:
        sys.path.insert(0, path)
