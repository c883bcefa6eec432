"""A user's own inventory as it is: its nodes in a group called gpu_nodes, not cluster. setup,
launch, doctor and the CLI all take -e torchfleet_group=gpu_nodes; without it they say so."""

import json
import sys

import pytest

from ready_cluster import NODES, recap, run, training_result

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def own_inventory(cluster, tmp_path_factory):
    """The shared cluster's inventory, with its group renamed gpu_nodes."""
    text = cluster.inventory.read_text()
    assert "\n    cluster:\n" in text
    path = tmp_path_factory.mktemp("own") / "inventory.yml"
    path.write_text(text.replace("\n    cluster:\n", "\n    gpu_nodes:\n"))
    return path


def playbook(cluster, inventory, name, *extra):
    result = run(["ansible-playbook", name, "-i", str(inventory), "-e", f"ssh_trust_key_file={cluster.key}",
                  "-e", "torchfleet_group=gpu_nodes", *extra], env=cluster.env, timeout=1800)
    return result.returncode, result.stdout + result.stderr


def test_setup_launch_and_doctor_on_a_group_of_the_users_own(cluster, own_inventory, tmp_path):
    rc, output = playbook(cluster, own_inventory, "setup.yml")
    assert rc == 0, output[-3000:]
    assert set(recap(output)) >= set(NODES)
    assert all(counts["changed"] == 0 for host, counts in recap(output).items()), output[-3000:]

    # One worker a node: what this proves is the group's name, not workers per node (Molecule's
    # scenario and test_mpich_cluster launch two a node).
    rc, output = playbook(cluster, own_inventory, "launch.yml", "-e", "script=examples/train.py",
                          "-e", "nproc_per_node=1", "-e", '{"script_args": ["--epochs", "2", "--no-wandb"]}')
    assert rc == 0, output[-3000:]
    result = training_result(output)
    assert result["world_size"] == 3 and len(result["losses"]) == 2

    report = tmp_path / "doctor.json"
    rc, output = playbook(cluster, own_inventory, "doctor.yml", "-e", f"doctor_report={report}")
    assert rc == 0, output[-3000:]
    results = json.loads(report.read_text())["results"]
    assert {entry["host"] for entry in results} >= set(NODES)
    assert [entry for entry in results if not entry["ok"]] == [], results


def test_what_render_prints_runs_as_shown_on_the_head(cluster, own_inventory):
    """`torchfleet render` pasted into a shell on the head, as the training account: it trains."""
    result = run([sys.executable, "-m", "torchfleet", "render", "examples/train.py", "-i", str(own_inventory),
                  "-e", "torchfleet_group=gpu_nodes", "-e", "nproc_per_node=1", "--", "--epochs", "1", "--no-wandb"],
                 env=cluster.env, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "cached facts" in result.stderr
    # The script is where the launch before put it, on every node.
    pasted = run(["docker", "exec", "-i", "-u", "torchfleet", "-w", "/home/torchfleet", NODES[0], "bash", "-s"],
                 input=result.stdout, timeout=600)
    assert pasted.returncode == 0, pasted.stdout[-2000:] + pasted.stderr[-2000:]
    assert training_result(pasted.stdout)["world_size"] == 3


def test_the_cli_takes_the_group_too(cluster, own_inventory):
    result = run([sys.executable, "-m", "torchfleet", "runs", "-i", str(own_inventory), "-e",
                  "torchfleet_group=gpu_nodes", "--json"], env=cluster.env, timeout=600)
    assert result.returncode == 0, result.stderr
    assert isinstance(json.loads(result.stdout), list)
    result = run([sys.executable, "-m", "torchfleet", "render", "examples/train.py", "-i", str(own_inventory),
                  "-e", "torchfleet_group=gpu_nodes"], env=cluster.env, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "mpirun" in result.stdout and f"On the head ({NODES[0]})" in result.stdout


def test_without_the_group_every_entry_point_names_the_variable(cluster, own_inventory):
    result = run(["ansible-playbook", "launch.yml", "-i", str(own_inventory), "-e", "script=examples/train.py"],
                 env=cluster.env, timeout=600)
    assert result.returncode != 0
    assert "torchfleet_group=NAME" in " ".join(result.stdout.split())
    result = run([sys.executable, "-m", "torchfleet", "runs", "-i", str(own_inventory)], env=cluster.env, timeout=600)
    assert result.returncode != 0
    assert "-e torchfleet_group=NAME" in result.stderr
