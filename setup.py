"""Puts the torchfleet.cluster collection into the wheel, beside the torchfleet package.

The repository root is the collection; a wheel carries a copy of it under
torchfleet/collection/ansible_collections/torchfleet/cluster, where `torchfleet` finds it when
it does not run from a checkout (see torchfleet/collection.py). Everything else is in
pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
COLLECTION = ("galaxy.yml", "README.md", "meta", "plugins", "roles", "playbooks")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")


class BuildWithCollection(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "torchfleet" / "collection" / "ansible_collections" / "torchfleet" / "cluster"
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for name in COLLECTION:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, target / name, ignore=IGNORE)
            else:
                shutil.copy2(source, target / name)


setup(cmdclass={"build_py": BuildWithCollection})
