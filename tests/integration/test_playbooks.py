"""The playbooks from a checkout: bad inventories stop before any node is touched."""

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def playbook(*args, inventory_text=None, tmp_path=None):
    argv = ["ansible-playbook", *args]
    if inventory_text is not None:
        inventory = tmp_path / "hosts.yml"
        inventory.write_text(inventory_text)
        argv += ["-i", str(inventory)]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("name", ["setup.yml", "launch.yml"])
def test_user_playbooks_parse_from_a_checkout(name):
    result = playbook(name, "--syntax-check", "-e", "script=train.py")
    assert result.returncode == 0, result.stdout + result.stderr


# Addresses on this machine only: these inventories are never connected to, the checks stop first.
BAD_INVENTORIES = {
    "empty group": ("all:\n  children:\n    cluster:\n      hosts: {}\n",
                    "no hosts in group 'cluster'"),
    "no group at all": ("all:\n  hosts:\n    a:\n      ansible_host: 127.0.0.2\n",
                        "no hosts in group 'cluster'"),
    "head outside the group": (
        "all:\n  hosts:\n    outsider: {ansible_host: 127.0.0.9}\n  children:\n    cluster:\n      hosts:\n"
        "        a: {ansible_host: 127.0.0.2}\n        b: {ansible_host: 127.0.0.3}\n"
        "      vars:\n        torchfleet_head: outsider\n",
        "torchfleet_head is 'outsider', which is not in group 'cluster' (a, b)"),
    "one machine under two names": (
        "all:\n  children:\n    cluster:\n      hosts:\n        a: {ansible_host: 127.0.0.2}\n"
        "        b: {ansible_host: 127.0.0.3}\n        c: {ansible_host: 127.0.0.2}\n",
        "a and c are both 127.0.0.2"),
}


@pytest.mark.parametrize("case", sorted(BAD_INVENTORIES))
def test_bad_inventory_fails_before_any_node_is_touched(case, tmp_path):
    text, message = BAD_INVENTORIES[case]
    result = playbook("setup.yml", inventory_text=text, tmp_path=tmp_path)
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert message in output
    # The only play that ran is the controller's check: no task reached a node.
    assert "Make every node ready" not in output
    assert "Traceback" not in output


# Two nodes that are never connected to: the spec checks stop the run before any task reaches them.
GOOD_INVENTORY = ("all:\n  children:\n    cluster:\n      hosts:\n        a: {ansible_host: 127.0.0.2}\n"
                  "        b: {ansible_host: 127.0.0.3}\n")
BAD_SPECS = {
    "unknown engine": ('{"python_env_engine": "pixi"}', "python_env_engine is 'pixi', which torchfleet does not know"),
    "unpinned torch": ('{"python_env_packages": ["torch>=2.0", "numpy"]}',
                       "torch must be pinned with == so every node gets the same build, but the spec says 'torch>=2.0'"),
    "bare torch": ('{"python_env_packages": ["torch"]}', "torch must be pinned with =="),
    "no torch": ('{"python_env_packages": ["numpy"]}', "python_env_packages has no torch"),
    "torch twice": ('{"python_env_packages": ["torch==2.13.0", "torch==2.12.0"]}', "names torch more than once"),
    "not a requirement": ('{"python_env_packages": ["torch==2.13.0", "numpy; rm -rf /"]}',
                          "entries that are not requirement strings: numpy; rm -rf /"),
    "conda without micromamba": ('{"python_env_engine": "conda", "python_env_conda_file": "env.yml"}',
                                 "The conda engine needs python_env_conda_file"),
    "open mpi source without tarball": ('{"openmpi_source": "source", "openmpi_prefix": "/opt/openmpi"}',
                                        "set openmpi_prefix (where to install, for example /opt/openmpi) and openmpi_source_tarball"),
    "open mpi source not a release": ('{"openmpi_source": "source", "openmpi_prefix": "/opt/ompi", "openmpi_source_tarball": "README.md"}',
                                      "tarball='README.md'"),
    "micromamba url without checksum": (
        '{"python_env_engine": "conda", "python_env_conda_file": "env.yml", "python_env_micromamba_url": "https://x/m"}',
        "micromamba_url='https://x/m', checksum=''"),
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_bad_python_spec_fails_before_any_node_is_touched(case, tmp_path):
    extra, message = BAD_SPECS[case]
    result = playbook("setup.yml", "-e", extra, inventory_text=GOOD_INVENTORY, tmp_path=tmp_path)
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert message in output
    # Facts are read right after the checks: no task connected to a node.
    assert "Read every node's facts afresh" not in output
    assert "UNREACHABLE" not in output


def test_launch_without_nodes_says_so(tmp_path):
    result = playbook("launch.yml", "-e", "script=examples/train.py", inventory_text="all: {}\n", tmp_path=tmp_path)
    assert result.returncode != 0
    assert "The inventory has no hosts in group 'cluster'" in " ".join(result.stdout.split())


def test_launch_says_what_is_missing(tmp_path):
    result = playbook("launch.yml", inventory_text=GOOD_INVENTORY, tmp_path=tmp_path)
    output = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "Name the training script: ansible-playbook launch.yml -e script=train.py" in output


def test_fresh_checkout_inventory_says_what_to_do(tmp_path):
    """The repository's own inventory/ as a fresh clone has it (no nodes yet): the README's first
    command names the fix, with no warning from Ansible."""
    shipped = subprocess.run(["git", "ls-files", "inventory"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    assert "inventory/hosts.yml.example" in shipped
    for name in shipped:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes((REPO / name).read_bytes())
    result = playbook("setup.yml", "-i", str(tmp_path / "inventory"))
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert "copy inventory/hosts.yml.example to inventory/hosts.yml" in output
    assert "torchfleet_group=NAME" in output
    assert "[WARNING]" not in output
