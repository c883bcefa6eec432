"""torchfleet/dry_run.py: the launch plan `torchfleet render` shows, built from the inventory's
variables and setup's cached facts through the launch's own request and renderer, and its JSON
and text forms. The command around it is in cli/test_render.py."""

import json
import re
import subprocess

import pytest

from torchfleet import dry_run as tfplan
from torchfleet.extra_vars import RenderError

HOSTS = ["gpu01", "gpu02"]


def hostvars(**common):
    return {"gpu01": {"ansible_host": "192.0.2.11", **common}, "gpu02": {"ansible_host": "192.0.2.12", **common}}


def facts(cache, host, address, gpus=4, **more):
    """Setup's facts of `host` in the jsonfile cache (ansible-core before 2.19: plain JSON)."""
    cache.mkdir(exist_ok=True)
    values = {"preflight_net": {"interface": "ib0", "address": address}, "preflight_gpu_count": gpus,
              "python_env_python": "/opt/env/bin/python", "python_env_torchrun": "/opt/env/bin/torchrun",
              "openmpi_mpirun": "/usr/bin/mpirun", **more}
    (cache / host).write_text(json.dumps(values))


@pytest.fixture
def cache(tmp_path):
    path = tmp_path / "facts"
    facts(path, "gpu01", "10.9.0.11", cluster_user_account={"name": "trainer", "home": "/data/trainer"})
    facts(path, "gpu02", "10.9.0.12")
    return path


@pytest.mark.parametrize("value, truth", [("true", True), ("Yes", True), ("1", True), (True, True), ("on", True),
                                          ("false", False), ("no", False), ("0", False), (None, False), ("", False)])
def test_as_bool(value, truth):
    assert tfplan.as_bool(value) is truth


def test_as_int_names_what_is_not_a_number():
    assert tfplan._as_int("8", "x") == 8 and tfplan._as_int(3, "x") == 3
    with pytest.raises(RenderError, match=r"^gpu01: nproc_per_node must be a number, got 'all'$"):
        tfplan._as_int("all", "gpu01: nproc_per_node")
    with pytest.raises(RenderError, match="got None"):
        tfplan._as_int(None, "x")


def test_a_plan_from_the_facts_setup_cached(cache):
    plan, source = tfplan.build("train.py", ["--lr", "0.1"], {"run_id": "tf-1", "cluster_user_name": "trainer"},
                                HOSTS, hostvars(cluster_user_name="trainer"), cache)
    assert source == "facts" and plan.request.head == "gpu01" and plan.run_id == "tf-1"
    assert [(n.name, n.address, n.slots, n.interface) for n in plan.nodes] == [
        ("gpu01", "10.9.0.11", 4, "ib0"), ("gpu02", "10.9.0.12", 4, "ib0")]
    # The home setup recorded for the account, the environment's tools it found.
    assert plan.request.script == "/data/trainer/torchfleet/scripts/train.py" and plan.request.script_args == ["--lr", "0.1"]
    assert plan.hostfile_path == "/data/trainer/torchfleet/runs/tf-1/hostfile"
    assert plan.request.python == "/opt/env/bin/python" and plan.request.torchrun == "/opt/env/bin/torchrun"
    assert plan.request.launcher == "/usr/bin/mpirun" and plan.request.allow_run_as_root is False
    assert "PATH" in plan.env_pass


def test_a_plan_from_the_inventory_alone_needs_the_interface(tmp_path):
    with pytest.raises(RenderError, match=r"no facts cached for these nodes .* -e interface=NAME"):
        tfplan.build("train.py", [], {}, HOSTS, hostvars(), tmp_path)
    plan, source = tfplan.build("train.py", [], {"interface": "eth0", "run_id": "r"}, HOSTS,
                                hostvars(nproc_per_node=2), tmp_path)
    assert source == "inventory"
    assert [(n.address, n.slots, n.interface) for n in plan.nodes] == [("192.0.2.11", 2, "eth0"), ("192.0.2.12", 2, "eth0")]
    assert plan.request.python == "python3" and plan.request.torchrun == "torchrun" and plan.request.launcher is None
    assert plan.request.script == "/home/torchfleet/torchfleet/scripts/train.py"  # the role's default account and home
    # One node needs no interface; the inventory's own is taken where -e gives none.
    one, _source = tfplan.build("train.py", [], {}, ["gpu01"], hostvars(), tmp_path)
    assert one.nodes[0].interface is None and one.nodes[0].address == "192.0.2.11"
    named, _source = tfplan.build("train.py", [], {}, HOSTS, hostvars(torchfleet_interface="bond0"), tmp_path)
    assert {n.interface for n in named.nodes} == {"bond0"}


def test_facts_of_only_some_nodes_count_as_none(cache):
    (cache / "gpu02").unlink()
    plan, source = tfplan.build("train.py", [], {"interface": "eth0"}, HOSTS, hostvars(), cache)
    assert source == "inventory" and plan.nodes[0].address == "192.0.2.11"


def test_a_bad_gpu_count_or_request_variable_is_a_render_error(cache, tmp_path):
    facts(cache, "gpu02", "10.9.0.12", gpus="many")
    with pytest.raises(RenderError, match="preflight_gpu_count must be a number, got 'many'"):
        tfplan.build("train.py", [], {}, HOSTS, hostvars(), cache)
    # Refused by the launch's own check, in its words.
    with pytest.raises(RenderError, match="^the launch would refuse this: nproc_per_node is 'x': give auto"):
        tfplan.build("train.py", [], {"interface": "eth0"}, HOSTS, hostvars(nproc_per_node="x"), tmp_path)
    with pytest.raises(RenderError, match="master_port is 'abc': give the rendezvous port"):
        tfplan.build("train.py", [], {"master_port": "abc"}, HOSTS, hostvars(), cache)


@pytest.mark.parametrize("extra, inventory, home", [
    ({"cluster_user_name": "trainer"}, {}, "/data/trainer"),  # recorded by setup for this account
    ({}, {"cluster_user_name": "trainer"}, "/data/trainer"),
    ({}, {}, "/home/torchfleet"),  # recorded for another account (trainer): not the default one's
    ({"cluster_user_name": "other"}, {}, "/home/other"),
    ({"cluster_user_name": "other", "cluster_user_home": "/srv/other"}, {}, "/srv/other"),
    ({"cluster_user_name": "other"}, {"cluster_user_home": "/srv/inv"}, "/srv/inv"),
    ({"cluster_user_name": "root"}, {}, "/root"),
])
def test_the_training_accounts_home(cache, extra, inventory, home):
    plan, _source = tfplan.build("train.py", [], {"run_id": "r", **extra}, HOSTS, hostvars(**inventory), cache)
    assert plan.hostfile_path == f"{home}/torchfleet/runs/r/hostfile"


def test_root_runs_open_mpi_as_root_and_shared_storage_keeps_the_scripts_path(cache):
    plan, _source = tfplan.build("/shared/train.py", [], {"cluster_user_name": "root", "shared_storage": "true"}, HOSTS,
                                 hostvars(), cache)
    assert plan.request.allow_run_as_root is True and plan.request.script == "/shared/train.py"


def test_a_new_run_id_each_time_unless_given(cache):
    first, _source = tfplan.build("train.py", [], {}, HOSTS, hostvars(), cache)
    second, _source = tfplan.build("train.py", [], {}, HOSTS, hostvars(), cache)
    assert first.run_id != second.run_id
    assert re.fullmatch(r"tf-\d{8}-\d{6}-[0-9a-f]{6}", first.run_id)


def test_the_head_is_the_inventorys_or_the_first_node(cache):
    plan, _source = tfplan.build("train.py", [], {"torchfleet_head": "gpu02"}, HOSTS, hostvars(), cache)
    assert plan.request.head == "gpu02"


def test_mpich_mode_takes_what_setup_read_of_mpiexec(cache):
    facts(cache, "gpu01", "10.9.0.11", mpich_mpiexec="/opt/mpich/bin/mpiexec", mpich_found_launcher="hydra")
    plan, _source = tfplan.build("train.py", [], {"launch_mode": "mpich"}, HOSTS, hostvars(), cache)
    assert plan.request.mode == "mpich" and plan.request.launcher == "/opt/mpich/bin/mpiexec" and plan.request.mpich_launcher == "hydra"
    plan, _source = tfplan.build("train.py", [], {"launch_mode": "mpich", "mpich_launcher": "pals"}, HOSTS, hostvars(), cache)
    assert plan.request.mpich_launcher == "pals"


def test_a_batch_plan_has_placeholder_nodes_and_the_setups_interface(cache):
    plan, source = tfplan.build("train.py", [], {}, HOSTS, hostvars(), cache, batch_nodes=3, batch_slots=2)
    assert source == "facts" and plan.request.head == "node0" and plan.request.script == "train.py"
    assert [(n.name, n.slots, n.interface) for n in plan.nodes] == [
        ("node0", 2, "ib0"), ("node1", 2, "ib0"), ("node2", 2, "ib0")]
    assert plan.log_dir is None and plan.node_log_dir is None and plan.request.allow_run_as_root is False
    assert plan.request.mpirun_extra_args[-3:] == ["--mca", "plm", "slurm"]
    pbs, _source = tfplan.build("train.py", [], {"nproc_per_node": 4}, HOSTS, hostvars(), cache, batch_nodes=2,
                                batch_format="pbs")
    assert pbs.nodes[0].slots == 4 and "plm" not in pbs.request.mpirun_extra_args


def test_a_batch_plan_of_several_nodes_needs_an_interface(tmp_path):
    with pytest.raises(RenderError, match="needs their cluster network interface"):
        tfplan.build("train.py", [], {}, HOSTS, hostvars(), tmp_path, batch_nodes=2)
    one, _source = tfplan.build("train.py", [], {}, HOSTS, hostvars(), tmp_path, batch_nodes=1)
    assert one.nodes[0].slots == 1 and one.nodes[0].interface is None
    given, _source = tfplan.build("train.py", [], {"interface": "eth0"}, HOSTS, hostvars(), tmp_path, batch_nodes=2)
    assert {n.interface for n in given.nodes} == {"eth0"}


def test_render_turns_a_plan_error_into_a_render_error(cache):
    plan, _source = tfplan.build("train.py", [], {"env_set": {"RANK": "1"}}, HOSTS, hostvars(), cache)
    with pytest.raises(RenderError, match="env_set: RANK is set by torchfleet itself"):
        tfplan.render(plan)


def test_as_json_names_the_parts(cache):
    plan, _source = tfplan.build("train.py", ["a b"], {"run_id": "r", "nproc_per_node": 2,
                                                       "env_secrets": ["WANDB_API_KEY"]}, HOSTS, hostvars(), cache)
    data = tfplan.as_json(plan, tfplan.render(plan), "facts")
    assert data["head"] == "gpu01" and data["run_id"] == "r" and data["source"] == "facts" and data["mode"] == "torchrun"
    assert data["nodes"] == ["gpu01", "gpu02"] and data["nproc_per_node"] == 2 and data["world_size"] == 4
    assert data["hostfile"] == "10.9.0.11 slots=2\n10.9.0.12 slots=2\n"
    assert data["argv"][-1] == "a b" and data["env"]["WANDB_API_KEY"] == "<redacted>"
    json.dumps(data)
    rank, _source = tfplan.build("train.py", [], {"launch_mode": "rank"}, HOSTS, hostvars(), cache)
    assert tfplan.as_json(rank, tfplan.render(rank), "facts")["nproc_per_node"] is None


def test_as_text_is_a_script_a_shell_reads_as_it_is(cache):
    plan, _source = tfplan.build("train.py", ["$(rm -rf ~)"], {"run_id": "r", "env_pass": ["HF_HOME"], "cluster_user_name": "trainer",
                                                               "env_secrets": ["WANDB_API_KEY"],
                                                               "env_set": {"MSG": "it's"}}, HOSTS, hostvars(), cache)
    rendered = tfplan.render(plan)
    text = tfplan.as_text(plan, rendered, "facts")
    lines = text.splitlines()
    assert lines[0].startswith("# On the head (gpu01), as the training account")
    assert lines[1] == "mkdir -p /data/trainer/torchfleet/runs/r"
    assert lines[2] == "cat > /data/trainer/torchfleet/runs/r/hostfile <<'EOF'"
    assert lines[3:6] == ["10.9.0.11 slots=4", "10.9.0.12 slots=4", "EOF"]
    assert "export MSG='it'\"'\"'s'" in lines
    assert any(line.startswith("# passed on as this shell has them: ") and "HF_HOME" in line for line in lines)
    assert "# secrets, read from the controller's environment by a launch: export WANDB_API_KEY here first" in lines
    assert lines[-2] == tfplan.SUPERVISED and lines[-1] == rendered.command and text.endswith("\n")
    assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0


def test_under_slurm_the_job_the_launch_submits_is_shown(cache):
    plan, _source = tfplan.build("train.py", ["a b"], {"run_id": "r", "scheduler": "slurm", "slurm_partition": "gpu",
                                                       "cluster_user_name": "trainer"}, HOSTS, hostvars(), cache)
    rendered = tfplan.render(plan)
    data = tfplan.as_json(plan, rendered, "facts")
    run_dir = "/data/trainer/torchfleet/runs/r"
    assert data["argv"] == ["sbatch", "--parsable", f"--output={run_dir}/launcher.log",
                            "--chdir=/data/trainer/torchfleet/scripts", "--comment=torchfleet", "--no-requeue",
                            f"{run_dir}/job.sbatch"]
    script = data["batch_script"]
    assert "#SBATCH --job-name=r\n" in script and "#SBATCH --partition=gpu\n" in script and "run_id=r\n" in script
    assert "  --mca plm slurm \\\n" in script and "'a b'" in script  # the allocation's launcher, the script's args
    text = tfplan.as_text(plan, rendered, "facts")
    assert f"cat > {run_dir}/job.sbatch <<'TORCHFLEET_JOB'\n{script}TORCHFLEET_JOB\n" in text
    assert text.endswith(f"{tfplan.SLURM_DEFAULTS}\n{data['command']}\n")
    assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0


def test_exclude_leaves_a_node_out_of_the_plan_as_the_launch_does(cache):
    plan, _source = tfplan.build("train.py", [], {"exclude": "gpu02"}, HOSTS, hostvars(), cache)
    assert [node.name for node in plan.nodes] == ["gpu01"]
    with pytest.raises(RenderError, match="^the launch would refuse this: exclude names gpu09, not a node"):
        tfplan.build("train.py", [], {"exclude": ["gpu09"]}, HOSTS, hostvars(), cache)
    with pytest.raises(RenderError, match="The head gpu01 is left out of this run"):
        tfplan.build("train.py", [], {"exclude": "gpu01"}, HOSTS, hostvars(), cache)
    # --limit: the group's hosts beside the play's, as validate.yml gives them.
    plan, _source = tfplan.build("train.py", [], {}, ["gpu01"], hostvars(), cache, group_hosts=HOSTS)
    assert [node.name for node in plan.nodes] == ["gpu01"]


@pytest.mark.parametrize("extra, words", [
    ({"max_restarts": 1, "spare_nodes": 5}, "spare_nodes is 5, but the run has 2 node(s)"),
    ({"bind_to": "core"}, "bind_to is core, but in torchrun mode mpirun starts one torchrun per node"),
])
def test_what_the_launch_refuses_render_refuses_in_the_same_words(cache, extra, words):
    with pytest.raises(RenderError) as refused:
        tfplan.build("train.py", [], extra, HOSTS, hostvars(), cache)
    assert str(refused.value).startswith("the launch would refuse this: ") and words in str(refused.value)


def test_render_leaves_the_controllers_state_at_launch_time_to_the_launch(cache, monkeypatch):
    # A script not on this machine, a secret not exported: render shows where they go.
    monkeypatch.delenv("TF_UNSET_SECRET", raising=False)
    plan, _source = tfplan.build("not/here.py", [], {"env_secrets": ["TF_UNSET_SECRET"]}, HOSTS, hostvars(), cache)
    assert list(plan.env_secrets) == ["TF_UNSET_SECRET"]
