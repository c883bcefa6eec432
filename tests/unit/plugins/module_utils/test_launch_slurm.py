"""_launch_slurm.py: a launch under Slurm, as the launch module prepares it on the head: what it
refuses before anything is submitted, and the job it writes (sbatch's argv and the batch script).
Slurm's partitions are a stand-in (slurm.partitions); the script's own shape is in test_batch_script.py."""

from types import MappingProxyType

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils import _launch_slurm
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import slurm
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import Node
from plan_helpers import plan_of


class Refused(Exception):
    def __init__(self, result):
        super().__init__(result["msg"])
        self.result = result


class _Module:
    def __init__(self, bins=("sbatch", "scontrol")):
        self.bins = bins

    def get_bin_path(self, name, required=False):
        return f"/usr/bin/{name}" if name in self.bins else None

    def fail_json(self, **result):
        raise Refused(result)


PARTITIONS = {"debug": {"PartitionName": "debug", "Default": "YES", "State": "UP", "TotalNodes": "4",
                        "MaxTime": "02:00:00"},
              "gpu": {"PartitionName": "gpu", "Default": "NO", "State": "UP", "TotalNodes": "16", "MaxTime": "UNLIMITED"}}


@pytest.fixture(autouse=True)
def partitions(monkeypatch):
    monkeypatch.setattr(slurm, "partitions", lambda: PARTITIONS)


def a_plan(mode="torchrun", slots=(4, 4), **changes):
    nodes = tuple(Node(f"n{i}", f"10.0.0.{i + 1}", count, "eth0") for i, count in enumerate(slots))
    return plan_of(**{"nodes": nodes, "head": "n0", "script": "/s/train.py", "run_id": "r1",
                   "hostfile_path": "/runs/r1/hostfile", "mode": mode, **changes})


def job(module, plan=None):
    return _launch_slurm.checked_job(module, plan or a_plan(), "/runs/r1")


def refusal(module, plan=None):
    with pytest.raises(Refused) as refused:
        job(module, plan)
    assert refused.value.result["run_id"] == "r1"
    return refused.value.result["msg"]


def test_the_job_goes_to_the_default_partition_named_after_the_run():
    argv, script, path, options = job(_Module())
    assert path == "/runs/r1/job.sbatch"
    assert argv == ["/usr/bin/sbatch", "--parsable", "--output=/runs/r1/launcher.log", "--chdir=/runs/r1",
                    "--comment=torchfleet", "--no-requeue", "/runs/r1/job.sbatch"]
    assert options == {"gpus_per_node": None, "walltime": None, "queue": "debug", "account": None, "whole_nodes": True,
                       "extra_args": [], "slots": 4}
    assert "#SBATCH --partition=debug\n" in script and "#SBATCH --nodes=2\n" in script
    assert "#SBATCH --job-name=r1\n" in script and "run_id=r1\n" in script
    assert "#SBATCH --exclusive\n" in script and "--time" not in script and "--account" not in script


def test_the_sites_options_reach_the_script_and_the_restarts_options():
    plan = a_plan(nproc_per_node=2, slurm_partition="gpu", slurm_time_limit="1-00:00:00", slurm_account="proj_1",
                  slurm_gpus_per_node=4, batch_whole_nodes=False, slurm_extra_args=["--qos=high"], chdir="/data")
    argv, script, _path, options = job(_Module(), plan)
    assert "--chdir=/data" in argv
    for line in ("--partition=gpu", "--time=1-00:00:00", "--account=proj_1", "--gpus-per-node=4", "--qos=high"):
        assert f"#SBATCH {line}\n" in script
    assert "--exclusive" not in script
    assert options["slots"] == 2 and options["extra_args"] == ["--qos=high"] and options["queue"] == "gpu"


def test_no_slurm_commands_on_the_head_is_refused():
    assert "the head n0 has no sbatch and scontrol: install Slurm's client commands" in refusal(_Module(bins=()))
    assert "has no sbatch and scontrol" in refusal(_Module(bins=("sbatch",)))


@pytest.mark.parametrize("request_, words", [
    ({"slurm_extra_args": ["--qos=high\n#SBATCH --x"]}, "refusing to submit: slurm_extra_args item"),
    ({"slurm_extra_args": "--qos=high"}, "refusing to submit: slurm_extra_args must be a list"),
    ({"slurm_time_limit": "1h"}, "refusing to submit: slurm_time_limit '1h' is not a Slurm time limit"),
    ({"slurm_account": "a b"}, "refusing to submit: slurm_account 'a b' is not a Slurm name"),
    ({"slurm_partition": "cpu"}, "refusing to submit: Slurm has no partition 'cpu' (it has debug, gpu)"),
    ({"slurm_time_limit": "03:00:00"}, "above partition debug's limit 02:00:00"),
])
def test_what_slurm_would_refuse_is_refused_first(request_, words):
    assert words in refusal(_Module(), a_plan(**request_))


def test_a_partition_too_small_or_slurm_unreachable_is_refused(monkeypatch):
    assert "needs 5 nodes, Slurm partition debug has 4" in refusal(_Module(), a_plan(slots=(1,) * 5))

    def unreachable():
        raise FileNotFoundError(2, "No such file or directory", "scontrol")
    monkeypatch.setattr(slurm, "partitions", unreachable)
    assert refusal(_Module()).startswith("refusing to submit: [Errno 2] No such file or directory")


def test_rank_mode_needs_the_same_slots_on_every_node():
    assert "these nodes' slots differ; set nproc_per_node" in refusal(_Module(), a_plan("rank", (4, 2)))
    _argv, _script, _path, options = job(_Module(), a_plan("rank", (2, 2)))
    assert options["slots"] == 2
    # torchrun mode: the head's slots, whatever the others'
    assert job(_Module(), a_plan(slots=(8, 2)))[3]["slots"] == 8


def test_a_plan_the_renderer_refuses_is_refused_with_its_words():
    plan = a_plan(env_set=MappingProxyType({"RANK": "3"}))
    assert refusal(_Module(), plan).startswith("env_set: RANK is set by torchfleet itself")
