"""One filter per file, documented under its own name: ansible-doc -t filter NAME reads the
DOCUMENTATION of the file called NAME.py, so a file holding several filters shows one filter's
options for all of them."""

import importlib
from pathlib import Path

import pytest
import yaml

FILTERS = Path(__file__).resolve().parents[4] / "plugins" / "filter"


@pytest.mark.parametrize("path", sorted(FILTERS.glob("*.py")), ids=lambda path: path.stem)
def test_each_filter_file_holds_one_filter_under_its_own_name(path):
    module = importlib.import_module(f"ansible_collections.torchfleet.cluster.plugins.filter.{path.stem}")
    assert list(module.FilterModule().filters()) == [path.stem]
    assert yaml.safe_load(module.DOCUMENTATION)["name"] == path.stem
    assert yaml.safe_load(module.EXAMPLES)
    assert yaml.safe_load(module.RETURN)["_value"]["description"]
