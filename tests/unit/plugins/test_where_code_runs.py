"""The collection's Python code in three packages, named for where it runs (CONTRIBUTING.md, "The
layout"), and the imports each may make there:

- plugins/plugin_utils: the controller alone (filters, the inventory plugin, the CLI);
- plugins/module_utils: the modules on the nodes, shipped in each module's AnsiballZ payload, which
  carries module_utils and nothing else of the collection (the controller imports it too, to refuse
  a request before a node is touched);
- plugins/module_utils/_on_node: the program torchfleet runs on the nodes outside Ansible, copied
  there as bare files: the standard library and its own files only.
"""

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PLUGINS = REPO / "plugins"
PREFIX = "ansible_collections.torchfleet.cluster.plugins."


# Packages of the node's own Python environment, imported where they must be: _nccl reads the
# version of the NCCL wheel that torch would load, in the environment the module runs in.
NODE_ENVIRONMENT = {"nvidia.nccl"}


def imports(path: Path) -> set[str]:
    """The full names `path` imports, relative imports resolved, inside functions too. `from X
    import a` gives X and X.a, whichever of them is the module (`from PACKAGE import _x`)."""
    package = [*PREFIX.rstrip(".").split("."), *path.relative_to(PLUGINS).parent.parts]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*package[:len(package) - node.level + 1], *([node.module] if node.module else [])]) \
                if node.level else node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def stdlib(name: str) -> bool:
    return name.split(".")[0] in sys.stdlib_module_names


def module_utils_file(name: str) -> Path:
    """The file of a module_utils module, by its full name."""
    return (PLUGINS / name[len(PREFIX):].replace(".", "/")).with_suffix(".py")


def shippable(name: str) -> bool:
    """What a module may import: what AnsiballZ ships (ansible's and this collection's module_utils)."""
    return stdlib(name) or (name + ".").startswith(("ansible.module_utils.", PREFIX + "module_utils.")) or \
        name in NODE_ENVIRONMENT


def files(folder: str, recursive: bool = False) -> list[Path]:
    found = (PLUGINS / folder).rglob("*.py") if recursive else (PLUGINS / folder).glob("*.py")
    return sorted(path for path in found if "__pycache__" not in path.parts)


@pytest.mark.parametrize("path", files("module_utils/_on_node"), ids=lambda path: path.name)
def test_the_program_on_the_nodes_imports_the_standard_library_and_itself_alone(path):
    own = PREFIX + "module_utils._on_node"
    assert {name for name in imports(path) if not (stdlib(name) or name == own or name.startswith(own + "."))} == set()


@pytest.mark.parametrize("path", files("modules") + files("module_utils"), ids=lambda path: path.name)
def test_modules_and_module_utils_import_only_what_ansiballz_ships(path):
    assert {name for name in imports(path) if not shippable(name)} == set()


def test_every_module_util_runs_in_a_module_else_it_belongs_to_the_controller():
    """A module_utils file that no module imports, directly or through others, runs on the
    controller alone: plugin_utils is its place."""
    reached: set[Path] = set()
    todo = [name for path in files("modules") for name in imports(path) if name.startswith(PREFIX + "module_utils.")]
    while todo:
        path = module_utils_file(todo.pop())
        if path in reached or not path.is_file():
            continue
        reached.add(path)
        todo.extend(name for name in imports(path) if name.startswith(PREFIX + "module_utils."))
    assert reached, "no module imports module_utils: the test reads the wrong files"
    assert [path.name for path in files("module_utils") if path not in reached] == []


@pytest.mark.parametrize("path", files("plugin_utils"), ids=lambda path: path.name)
def test_the_controllers_own_code_is_not_imported_by_what_runs_on_the_nodes(path):
    name = PREFIX + "plugin_utils." + path.stem
    importers = [other.name for other in files("modules") + files("module_utils", recursive=True)
                 if name in imports(other) or any(imported.startswith(name + ".") for imported in imports(other))]
    assert importers == []
