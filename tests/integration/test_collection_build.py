"""The collection as Galaxy ships it: built, installed into an empty collections path, and used
from another directory, where no ansible.cfg of the checkout is read."""

import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())


def plugins(kind):
    return sorted(f"torchfleet.cluster.{path.stem}" for path in (REPO / "plugins" / kind).glob("*.py")
                  if not path.stem.startswith("_"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(a directory outside the checkout, the environment that finds only the installed collection)."""
    tmp = tmp_path_factory.mktemp("galaxy")
    # A site's own inventory in the checkout, as a user keeps it (git ignores it): never shipped.
    # Written only where the user has none, and removed after.
    site = REPO / "inventory" / "hosts.yml"
    written = not site.exists()
    if written:
        site.write_text("cluster:\n  hosts:\n    site-node0: {ansible_host: 10.11.12.13}\n")
    try:
        built = subprocess.run(["ansible-galaxy", "collection", "build", "--output-path", str(tmp)], cwd=REPO,
                               capture_output=True, text=True, check=False)
    finally:
        if written:
            site.unlink()
    assert built.returncode == 0, built.stdout + built.stderr
    tarball = tmp / f"torchfleet-cluster-{GALAXY['version']}.tar.gz"
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    assert "MANIFEST.json" in names and "roles/launch/tasks/main.yml" in names and "LICENSE" in names
    # Checkout plumbing, the Python package and any inventory stay out of the collection.
    assert not [name for name in names
                if name.startswith((".collections", ".venv", "torchfleet/", "bench/", "inventory"))], names
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(tmp / "collections"), ANSIBLE_CONFIG=str(elsewhere / "none.cfg"))
    done = subprocess.run(["ansible-galaxy", "collection", "install", str(tarball), "-p", str(tmp / "collections")],
                          cwd=elsewhere, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp / "collections" / "ansible_collections" / "torchfleet" / "cluster" / "MANIFEST.json").is_file()
    return elsewhere, env


@pytest.mark.parametrize("kind", ["module", "filter", "inventory", "role"])
def test_ansible_doc_of_every_plugin_from_the_installed_collection(installed, kind):
    elsewhere, env = installed
    names = (plugins({"module": "modules", "filter": "filter", "inventory": "inventory"}[kind]) if kind != "role"
             else sorted(f"torchfleet.cluster.{path.name}" for path in (REPO / "roles").iterdir()))
    assert names
    done = subprocess.run(["ansible-doc", "-t", kind, *names], cwd=elsewhere, env=env, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "[ERROR]" not in done.stderr and "[WARNING]" not in done.stderr, done.stderr
    for name in names:
        assert name in done.stdout
    # Each its own documentation: no filter shows another's.
    assert done.stdout.count("/ansible_collections/torchfleet/cluster/") >= len(names) or kind == "role"


@pytest.mark.parametrize("playbook", ["setup", "launch", "doctor"])
def test_the_playbooks_parse_from_the_installed_collection(installed, playbook):
    elsewhere, env = installed
    (elsewhere / "hosts.yml").write_text("cluster:\n  hosts:\n    node0: {ansible_host: 127.0.0.2}\n")
    done = subprocess.run(["ansible-playbook", f"torchfleet.cluster.{playbook}", "-i", "hosts.yml", "--syntax-check"],
                          cwd=elsewhere, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout + done.stderr, done.stdout + done.stderr


@pytest.mark.cluster
def test_setup_then_launch_from_the_installed_collection_elsewhere(installed, cluster):
    # Issue 28, point 5: no ansible.cfg of the checkout, so no fact cache (memory only, gone with
    # each ansible-playbook): the launch reads what setup learned back from the nodes' local facts.
    elsewhere, env = installed
    inventory = elsewhere / "cluster.yml"
    inventory.write_text(cluster.inventory.read_text())
    env = dict(env, XDG_STATE_HOME=cluster.env["XDG_STATE_HOME"])
    setup = subprocess.run(["ansible-playbook", "torchfleet.cluster.setup", "-i", str(inventory),
                            "-e", f"ssh_trust_key_file={cluster.key}"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=False, timeout=1800)
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    recap = {host: int(changed) for host, changed in re.findall(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)", setup.stdout, re.M)}
    assert recap and not any(recap.values()), recap  # a ready cluster: nothing changed, from here too
    launch = subprocess.run(["ansible-playbook", "torchfleet.cluster.launch", "-i", str(inventory),
                             "-e", f"script={REPO / 'examples' / 'train.py'}", "-e", "nproc_per_node=1",
                             "-e", '{"script_args": ["--use-syn", "--epochs", "1", "--no-wandb", "--out-dir", "/tmp"]}'],
                            cwd=elsewhere, env=env, capture_output=True, text=True, check=False, timeout=900)
    output = launch.stdout + launch.stderr
    assert launch.returncode == 0, output[-3000:]
    read = output.split("Read the facts setup recorded on the nodes the fact cache lacks]", 1)[1].split("TASK [", 1)[0]
    assert read.count("(item=") == 3, read  # every node's, read back from the node
    assert re.search(r"run tf-\S+: rc 0, world size 3", output), output[-3000:]
    assert not (elsewhere / ".cache").exists()
