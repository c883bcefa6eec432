"""The controller's checks of a Slurm launch (filter launch_problems), and the allocation's plan
(_on_node/batch_script.py's for_allocation): pure logic. Slurm as the launch reads it on the head
(_on_node/slurm.py) is in _on_node/test_slurm.py; Slurm itself is driven in tests/integration/test_slurm.py,
on a real slurmctld."""

import pytest

from ansible_collections.torchfleet.cluster.plugins.filter.launch_problems import launch_problems
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import batch_script as _batch_script, launch_plan as lp
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.renderer import render
from plan_helpers import plan_of


def test_the_allocation_plan_has_placeholders_and_no_ssh():
    plan = plan_of(nodes=(lp.Node("a", "10.0.0.1", 2, "eth0"), lp.Node("b", "10.0.0.2", 2, "eth0")),
                   head="a", script="/s/train.py", run_id="r1", hostfile_path="/runs/r1/hostfile",
                   ssh_control_path="/tmp/tf-ssh-x/%C")
    slurm = _batch_script.for_allocation(plan, "slurm", 3, 2, run_id="r1")
    assert [n.name for n in slurm.nodes] == ["node0", "node1", "node2"] and slurm.request.head == "node0"
    assert slurm.nodes[0].address == _batch_script.HEAD and slurm.run_id == "r1"
    assert slurm.ssh_control_path is None and slurm.request.mpirun_extra_args[-3:] == ["--mca", "plm", "slurm"]
    argv = render(slurm).argv
    assert not any("plm_rsh_args" in word for word in argv)
    pbs = _batch_script.for_allocation(plan, "pbs", 2, 2)
    assert pbs.run_id == _batch_script.RUN_ID and "plm" not in pbs.request.mpirun_extra_args


def request(**changes):
    hosts = ["node0", "node1"]
    base = {
        "action": "start", "script": "/", "shared_storage": True,
        "lists": {"script_args": [], "files": [], "env_pass": [], "env_secrets": [], "mpirun_extra_args": []},
        "nproc_per_node": "auto", "master_port": 29500,
        "nodes": [{"inventory_hostname": h, "preflight_net": {}, "python_env_torchrun": "/t"} for h in hosts],
        "log_dir": "~/runs", "group": "cluster", "group_hosts": hosts, "play_hosts": hosts,
        "mode": "torchrun", "head": "node0", "head_torchrun": "/t", "scheduler": "slurm", "tree_spawn": False,
        "slurm": {"partition": "", "account": "", "time_limit": "", "gpus_per_node": 0},
    }
    base.update(changes)
    return base


def test_a_good_slurm_request_has_no_problem():
    assert launch_problems(request()) == []
    assert launch_problems(request(slurm={"partition": "gpu", "account": "p1", "time_limit": "01:00:00",
                                          "gpus_per_node": "4"})) == []


@pytest.mark.parametrize("changes, words", [
    ({"scheduler": "pbs"}, "torchfleet render --format pbs"),
    ({"scheduler": "lsf"}, "give none (mpirun over ssh) or slurm"),
    ({"mode": "mpich"}, "launch_mode=mpich (MPICH's mpiexec) cannot run under it"),
    ({"tree_spawn": "true"}, "tree_spawn cannot apply"),
    ({"slurm": {"time_limit": "1h"}}, "slurm_time_limit '1h' is not a Slurm time limit"),
    ({"slurm": {"partition": "a b"}}, "slurm_partition 'a b' is not a Slurm name"),
    ({"slurm": {"gpus_per_node": "all"}}, "slurm_gpus_per_node is 'all'"),
    ({"scheduler": "none", "slurm": {"partition": "gpu"}}, "slurm_partition given without -e scheduler=slurm"),
])
def test_slurm_requests_refused_on_the_controller(changes, words):
    problems = launch_problems(request(**changes))
    assert any(words in problem for problem in problems), problems
