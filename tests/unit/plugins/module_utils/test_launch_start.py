"""_launch_start.py: the environment a launcher gets, the ssh masters mpirun rides, and the files of the
head package it installs."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_start as start, _on_node
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import RESERVED_ENV, Node
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.renderer import render
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_resolution import LaunchRequest
from plan_helpers import plan_of


class _Module:
    """The little of AnsibleModule that ssh_masters reads."""
    def __init__(self, check_mode=False, **params):
        self.check_mode = check_mode
        self.params = {"check_nodes": True, "tree_spawn": False, "mode": "torchrun", "scheduler": "none",
                       "nodes": [{"name": "head"}, {"name": "w1"}], "mpirun_extra_args": [], **params}


@pytest.mark.parametrize("check_mode, params, shared", [
    (False, {}, True),
    (True, {}, False),  # a check starts nothing
    (False, {"tree_spawn": True}, False),  # the head does not ssh to every node
    (False, {"mode": "mpich"}, False),
    (False, {"scheduler": "slurm"}, False),  # Slurm starts mpirun's daemons
    (False, {"check_nodes": False}, False),
    (False, {"nodes": [{"name": "head"}]}, False),
    (False, {"mpirun_extra_args": ["--mca", "plm_rsh_args", "-p 2222"]}, False),  # theirs, kept
])
def test_mpirun_rides_ssh_masters_only_where_it_sshes_to_every_node_itself(check_mode, params, shared,
                                                                           monkeypatch):
    for name in ("OMPI_MCA_plm_rsh_args", "OMPI_MCA_plm_rsh_agent"):
        monkeypatch.delenv(name, raising=False)
    module = _Module(check_mode, **params)
    control_dir = start.ssh_masters(module, LaunchRequest.of(module.params))
    try:
        assert (control_dir is not None) == shared
        if control_dir:
            # Room for ssh's socket name (%C, 40 characters, and a temporary suffix) in 107 bytes.
            assert control_dir.startswith("/tmp/tf-ssh-") and len(control_dir) < 40
            assert oct(os.stat(control_dir).st_mode & 0o777) == "0o700"
    finally:
        if control_dir:
            os.rmdir(control_dir)


def test_an_rsh_option_in_the_environment_keeps_the_masters_off(monkeypatch):
    monkeypatch.setenv("OMPI_MCA_plm_rsh_args", "-p 2222")
    module = _Module()
    assert start.ssh_masters(module, LaunchRequest.of(module.params)) is None


# ---------------------------------------------------------------------------------------------
# Environment
# ---------------------------------------------------------------------------------------------

def test_env_pass_adds_path_ld_library_path_and_nccl_when_set():
    environ = {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/lib", "NCCL_DEBUG": "INFO",
               "NCCL_IB_DISABLE": "1", "HF_HOME": "/data/hf", "OTHER": "x"}
    names, missing = start.resolve_env_pass(["HF_HOME"], environ, taken=frozenset())
    assert names == ["HF_HOME", "PATH", "LD_LIBRARY_PATH", "NCCL_DEBUG", "NCCL_IB_DISABLE"]
    assert missing == []


def test_env_pass_adds_only_what_is_set():
    assert start.resolve_env_pass([], {"PATH": "/bin"}, taken=frozenset()) == (["PATH"], [])
    assert start.resolve_env_pass([], {}, taken=frozenset()) == ([], [])


def test_env_pass_explicit_names_must_be_set():
    names, missing = start.resolve_env_pass(["HF_HOME", "DATA", "HF_HOME"], {"DATA": "/d"},
                                            taken=frozenset())
    assert names == ["HF_HOME", "DATA"]
    assert missing == ["HF_HOME"]


def test_env_pass_leaves_out_what_torchfleet_or_the_user_sets():
    # NCCL_SOCKET_IFNAME comes from the nodes' interfaces; NCCL_DEBUG is in env_set.
    environ = {"PATH": "/bin", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN",
               "NCCL_ALGO": "Ring"}
    taken = RESERVED_ENV | {"NCCL_DEBUG"}
    names, missing = start.resolve_env_pass([], environ, taken)
    assert names == ["PATH", "NCCL_ALGO"]
    plan = plan_of(nodes=(Node("a", "10.0.0.1", 1, "eth0"),), head="a", script="t.py", run_id="r",
                   hostfile_path="/tmp/h", env_pass=tuple(names), env_set={"NCCL_DEBUG": "INFO"})
    render(plan)  # the renderer accepts the result


def test_launcher_env_keeps_little_of_the_module_environment():
    environ = {"PATH": "/bin", "HOME": "/root", "LC_ALL": "C.UTF-8",
               "OMPI_MCA_plm_rsh_agent": "ssh", "ANSIBLE_MODULE_ARGS": "x",
               "PYTHONPATH": "/tmp/ansible", "HF_HOME": "/hf", "RANDOM_VAR": "1"}
    env = start.launcher_env(environ, {"HF_HOME"}, {"TORCHFLEET_RUN_ID": "r"}, {"TOKEN": "s"})
    assert env == {"PATH": "/bin", "HOME": "/root", "LC_ALL": "C.UTF-8",
                   "OMPI_MCA_plm_rsh_agent": "ssh", "HF_HOME": "/hf", "TORCHFLEET_RUN_ID": "r",
                   "TOKEN": "s"}


def test_the_head_package_lists_each_of_its_files():
    here = Path(_on_node.__file__).parent
    assert sorted(_on_node.FILES) == sorted(path.stem for path in here.glob("*.py"))


def _imported(path: Path, package: str):
    """The names a file imports (absolute; `from X import Y` gives X and X.Y), as AnsiballZ reads them."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            base = ".".join(parts + ([node.module] if node.module else []))
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def test_the_launch_modules_zip_carries_every_file_of_the_head_package():
    # AnsiballZ puts in the module's zip the module_utils its imports reach; head_package_files reads
    # the head package's files from there: a file nothing imports would be missing on the head.
    plugins = Path(_on_node.__file__).parents[2]
    prefix = "ansible_collections.torchfleet.cluster.plugins"
    seen, waiting = set(), [(plugins / "modules" / "torchrun_launch.py", f"{prefix}.modules")]
    while waiting:
        path, package = waiting.pop()
        for name in _imported(path, package):
            if not name.startswith(prefix + ".") or name in seen:
                continue
            where = plugins.joinpath(*name.split(".")[4:])
            for found, its_package in ((where.with_suffix(".py"), name.rpartition(".")[0]), (where / "__init__.py", name)):
                if found.is_file():
                    seen.add(name)
                    waiting.append((found, its_package))
    carried = {name.rpartition(".")[2] for name in seen if name.startswith(f"{prefix}.module_utils._on_node.")}
    assert set(_on_node.FILES) - {"__init__"} <= carried, set(_on_node.FILES) - {"__init__"} - carried


def test_a_torchft_launch_of_a_script_that_never_names_torchft_is_warned_of():
    import base64  # pylint: disable=import-outside-toplevel

    def warned(text, fault_tolerance="torchft", script="~/scripts/train.py"):
        request = LaunchRequest.of({"script": script, "fault_tolerance": fault_tolerance})
        # As the launch role sends it: the script's path on the nodes, ~ for the account's home.
        files, _digests = start.files_to_place({"~/scripts/train.py": base64.b64encode(text).decode()})
        return start.torchft_unused(request, files)
    said = warned(b"import torch\n")
    assert said and "~/scripts/train.py never names torchft" in said
    assert warned(b"import torch\n", script=os.path.expanduser("~/scripts/train.py"))
    assert warned(b"from torchft import Manager\n") is None
    assert warned(b"import torch\n", "none") is None
    assert warned(b"import torch\n", script="/shared/t.py") is None  # shared storage: nothing sent
