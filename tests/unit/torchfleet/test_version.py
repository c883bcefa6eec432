"""One version everywhere: written in torchfleet.__version__ (pyproject.toml reads it from there) and
in galaxy.yml (ansible-galaxy reads no other file), which must agree; no plugin added after it."""

import re
import tomllib
from pathlib import Path

import yaml

import torchfleet

REPO = Path(__file__).resolve().parents[3]


def test_the_collection_and_the_package_have_one_version():
    collection = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" in project["project"]["dynamic"] and "version" not in project["project"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "torchfleet.__version__"}
    assert collection == torchfleet.__version__


def test_no_plugin_is_added_in_a_version_after_the_collections():
    version = tuple(int(part) for part in yaml.safe_load((REPO / "galaxy.yml").read_text())["version"].split("."))
    for path in sorted((REPO / "plugins").rglob("*.py")):
        for added in re.findall(r'^version_added:\s*"?([\d.]+)"?', path.read_text(), re.M):
            assert tuple(int(part) for part in added.split(".")) <= version, path
