"""MPICH beside Open MPI on three real containers: setup installs it (converging, idempotent, a node
with another MPICH refused by name); launch_mode=mpich runs examples/train.py through MPICH's Hydra
over the cluster's ssh, with the Open MPI modes' report, stop and timeout (the timeout with
tests/integration/ticker.py's ranks, which need no torch); examples/train_fsdp.py trains sharded on
six workers, saves a DCP checkpoint on the nodes' shared directory and resumes it on other world
sizes through the other launchers (Hydra, then Open MPI's rank mode). `torchfleet render` shows
what a Hydra launch runs (test_render_is_the_launch.py's comparison).

The Open MPI tests that run after this file run with MPICH installed beside it: that is the proof
that the two live on one node.
"""

import json
import os
import re

import pytest

from ready_cluster import NODES, recap, run, training_result
# Ranks without torch, where a test proves what Hydra's launch does with a run, not training.
from test_run_lifecycle import ENDLESS, TICKER
from test_render_is_the_launch import assert_render_is_the_launch
from torchfleet import devcluster

pytestmark = pytest.mark.cluster
RUNS = "/home/torchfleet/torchfleet/runs"
HYDRA = ["-e", "launch_mode=mpich", "-e", "nproc_per_node=2"]
LEFT = re.compile(r"train|ticker|torchrun|hydra_pmi_proxy|mpiexec|_on_node\.(supervisor|guardian)")


def node_sh(node, script, user=None):
    result = run(["docker", "exec", *(["-u", user] if user else []), node, "sh", "-c", script], timeout=300)
    return result.returncode, result.stdout + result.stderr


def left_on(node):
    """What of a run still runs on `node`: training, torchrun, Hydra's proxies and launcher."""
    listing = node_sh(node, "pgrep -u torchfleet -a || true")[1]
    return [line for line in listing.splitlines() if LEFT.search(line)]


def script_args(*args):
    return ["-e", json.dumps({"script_args": list(args)})]


@pytest.fixture(scope="module")
def mpich(cluster):
    rc, output = cluster.setup("-e", "mpi_implementation=mpich")
    assert rc == 0, output[-3000:]
    return cluster


def test_setup_installs_mpich_beside_open_mpi_and_converges(mpich):
    rc, output = mpich.setup("-e", "mpi_implementation=mpich")
    assert rc == 0, output[-3000:]
    assert all(host["changed"] == 0 for name, host in recap(output).items() if name in NODES), output[-2000:]
    for node in NODES:
        rc, hydra = node_sh(node, "/usr/bin/mpiexec.hydra --version")
        assert rc == 0 and "HYDRA build details" in hydra
        rc, openmpi = node_sh(node, "/usr/bin/mpirun.openmpi --version")
        assert rc == 0 and re.search(r"\((Open MPI|OpenRTE)\) 4\.", openmpi), openmpi


def test_a_node_with_another_mpich_is_refused_by_name(mpich, tmp_path):
    # Debian 12 has one MPICH; a second install on one node is stood in by an mpiexec that answers
    # --version as Hydra 4.1.2 does. The version check, the part under test, is the real one.
    odd = NODES[2]
    rc, said = node_sh(odd, "mkdir -p /opt/other-mpich/bin && printf '%s\\n' '#!/bin/sh' "
                            "'printf \"HYDRA build details:\\n    Version:    4.1.2\\n\"' "
                            "> /opt/other-mpich/bin/mpiexec && chmod 755 /opt/other-mpich/bin/mpiexec")
    assert rc == 0, said
    extra = tmp_path / "odd.yml"
    extra.write_text(json.dumps({"all": {"hosts": {odd: {"mpich_source": "existing",
                                                         "mpich_prefix": "/opt/other-mpich"}}}}))
    play = tmp_path / "mpich.yml"
    play.write_text("- hosts: cluster\n  become: true\n  gather_facts: true\n  gather_subset: [min]\n"
                    "  roles: [torchfleet.cluster.mpich]\n")
    try:
        rc, output = mpich.playbook(str(play), "-i", str(extra))
    finally:
        node_sh(odd, "rm -rf /opt/other-mpich")
    assert rc != 0
    assert f"MPICH differs between nodes: {NODES[0]} has hydra 4.0.2, {odd} has hydra 4.1.2;" in \
        " ".join(output.split()), output[-3000:]
    assert "pin mpich_version or fix the odd node" in output


def test_hydra_runs_train_py_on_six_workers(mpich):
    rc, output = mpich.launch("-e", "script=examples/train.py", *HYDRA, "-e", "run_id=hydra-train",
                              *script_args("--epochs", "2"))
    assert rc == 0, output[-3000:]
    result = training_result(output)
    assert result["world_size"] == 6 and result["losses"][1] < result["losses"][0]
    state = node_sh(NODES[0], f"cat {RUNS}/hydra-train/state.json")[1]
    record = json.loads(state)
    assert record["state"] == "succeeded" and record["mode"] == "mpich"
    # The launcher by its full path, Hydra's ssh launcher, the cluster interface for its proxies.
    assert record["command"].startswith("/usr/bin/mpiexec.hydra -launcher ssh -n 3 -ppn 1 -f ")
    assert "-iface eth0" in record["command"]
    # Every node keeps its torchrun's per-worker logs in a directory of its own (its node rank):
    # its ranks' output, there alone.
    for index, node in enumerate(NODES):
        rc, found = node_sh(node, f"cat {RUNS}/hydra-train/workers/node{index}/*/attempt_0/*/stdout.log")
        assert rc == 0, found
        hosts = set(re.findall(r"^TORCHFLEET_RANK .* host=(node\d) ", found, re.M))
        assert hosts == {f"node{index}"}, found[-2000:]
    assert "TORCHFLEET_RANK" not in node_sh(NODES[0], f"cat {RUNS}/hydra-train/launcher.log")[1]


def test_render_shows_the_argv_and_hostfile_a_hydra_launch_runs(mpich):
    # The launcher and its flavour from the facts setup recorded, by the one function both use.
    rendered, plan = assert_render_is_the_launch(mpich, *HYDRA)
    assert rendered["argv"][:3] == ["/usr/bin/mpiexec.hydra", "-launcher", "ssh"], rendered["argv"]
    assert plan["request"]["mpich_launcher"] == "hydra"


def test_hydra_names_the_failing_rank_and_its_node(mpich):
    rc, output = mpich.launch("-e", "script=examples/train.py", *HYDRA,
                              *script_args("--epochs", "2", "--fail-on-rank", "3"))
    assert rc != 0
    assert f"rank 3 on {NODES[1]} exited with code 3 first; its log: " in output, output[-3000:]
    for node in NODES:
        assert left_on(node) == [], node


def test_hydra_run_detaches_carries_the_environment_and_stops_leaving_nothing(mpich):
    secret = "hydra-s3cret-value"
    env = dict(mpich.env, TF_HYDRA_SECRET=secret)
    argv = ["ansible-playbook", "launch.yml", "-i", str(mpich.inventory), "-e", "script=examples/train.py",
            *HYDRA, "-e", "detach=true", "-e", "run_id=hydra-stop",
            "-e", '{"env_secrets": ["TF_HYDRA_SECRET"], "env_set": {"TF_HYDRA_SET": "set-by-name"}}',
            *script_args("--epochs", "100", "--steps-per-epoch", "5", "--sleep", "2")]
    started = run(argv, env=env, timeout=600)
    assert started.returncode == 0, started.stdout[-3000:]
    assert secret not in started.stdout + started.stderr
    try:
        # The last node's workers got the values by name, through Hydra's -genvall.
        rc, environ = node_sh(NODES[2], "for p in $(pgrep -u torchfleet -f train.py); do "
                                        "tr '\\0' '\\n' < /proc/$p/environ; done", user="torchfleet")
        assert f"TF_HYDRA_SECRET={secret}" in environ and "TF_HYDRA_SET=set-by-name" in environ
        assert "TORCHFLEET_RUN_ID=hydra-stop" in environ
        for node in NODES:
            listing = node_sh(node, "ps -eo args")[1]
            assert secret not in listing, node
        kept = node_sh(NODES[0], f"cat {RUNS}/hydra-stop/state.json {RUNS}/hydra-stop/run.json")[1]
        assert secret not in kept
    finally:
        rc, output = mpich.launch("-e", "launch_action=stop", "-e", "run_id=hydra-stop")
    assert rc == 0, output[-3000:]
    for node in NODES:
        assert left_on(node) == [], node
    state = node_sh(NODES[0], f"cat {RUNS}/hydra-stop/state.json")[1]
    assert json.loads(state)["state"] == "stopped"


def test_hydra_run_past_its_timeout_is_stopped_leaving_nothing(mpich):
    rc, output = mpich.launch("-e", f"script={TICKER}", *HYDRA, "-e", "launch_timeout=30", *script_args(*ENDLESS))
    assert rc != 0
    assert "outlived launch_timeout=30s and was stopped" in output, output[-3000:]
    for node in NODES:
        assert left_on(node) == [], node


def test_fsdp_trains_sharded_saves_and_resumes_on_another_world_size(mpich):
    checkpoint = f"{devcluster.SHARED_MOUNT}/fsdp-{os.getpid()}"
    common = ["-e", "script=examples/train_fsdp.py"]
    # Six workers, Open MPI's torchrun mode: two epochs, a sharded checkpoint after each.
    rc, output = mpich.launch(*common, "-e", "nproc_per_node=2",
                              *script_args("--epochs", "2", "--checkpoint-dir", checkpoint))
    assert rc == 0, output[-3000:]
    first = training_result(output)
    assert first["world_size"] == 6 and first["strategy"] == "fsdp"
    assert first["losses"][1] < first["losses"][0] and first["resumed_from_epoch"] is None
    # Every rank wrote its own shard (DCP's files are named by the rank that wrote them).
    files = node_sh(NODES[1], f"ls {checkpoint}/$(cat {checkpoint}/latest)")[1]
    assert len(re.findall(r"__\d+_0\.distcp", files)) == 6, files
    # Three workers through MPICH's Hydra: DCP reshards the six shards onto three ranks.
    rc, output = mpich.launch(*common, "-e", "launch_mode=mpich", "-e", "nproc_per_node=1",
                              *script_args("--epochs", "4", "--checkpoint-dir", checkpoint, "--resume"))
    assert rc == 0, output[-3000:]
    resumed = training_result(output)
    assert resumed["world_size"] == 3 and resumed["saved_world_size"] == 6
    assert resumed["resumed_from_epoch"] == 2 and resumed["losses"][:2] == first["losses"]
    assert len(resumed["losses"]) == 4 and resumed["losses"][3] < resumed["losses"][0]
    # And back to six, one Open MPI rank per worker (rank mode: no torchrun, the ranks' variables).
    rc, output = mpich.launch(*common, "-e", "launch_mode=rank", "-e", "nproc_per_node=2",
                              *script_args("--epochs", "5", "--checkpoint-dir", checkpoint, "--resume"))
    assert rc == 0, output[-3000:]
    last = training_result(output)
    assert last["world_size"] == 6 and last["saved_world_size"] == 3 and last["resumed_from_epoch"] == 4
    assert last["losses"][:4] == resumed["losses"] and len(last["losses"]) == 5
    node_sh(NODES[0], f"rm -rf {checkpoint}")
