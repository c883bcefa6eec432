"""Where the torchfleet.cluster collection is: a checkout's .collections, or the wheel's copy."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CHECKOUT = PACKAGE.parent


def collections_path() -> Path:
    """The directory to put in ANSIBLE_COLLECTIONS_PATH (it holds ansible_collections/)."""
    linked = CHECKOUT / ".collections"
    if (CHECKOUT / "galaxy.yml").is_file() and (linked / "ansible_collections/torchfleet/cluster").is_dir():
        return linked
    return PACKAGE / "collection"


def collection_root() -> Path:
    return collections_path() / "ansible_collections" / "torchfleet" / "cluster"


@cache
def module_util(name: str):
    """Import one of the collection's pure module_utils (`_launch_plan`, `_hostfile`) by path."""
    path = collection_root() / "plugins" / "module_utils" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"torchfleet._collection_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module
