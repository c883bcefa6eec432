"""The launch request's checks (filter launch_problems) and the run's nodes (filter launch_nodes).

The playbook path of every message is tested against containers in tests/integration/test_bad_input.py;
these tests cover the combinations, and that a good request passes.
"""

import pytest

from ansible_collections.torchfleet.cluster.plugins.filter.launch_nodes import launch_nodes
from ansible_collections.torchfleet.cluster.plugins.filter.launch_problems import launch_problems
from ansible_collections.torchfleet.cluster.plugins.module_utils._launch_checks import run_nodes

HOSTS = ["node0", "node1", "node2"]


@pytest.fixture
def request_(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "data.csv").write_text("1\n")
    monkeypatch.setenv("TF_TEST_SECRET", "s3cret")
    monkeypatch.delenv("TF_TEST_UNSET", raising=False)
    return {
        "action": "start", "script": "train.py", "shared_storage": False,
        "lists": {"script_args": ["--epochs", "3"], "files": ["data.csv"], "env_pass": ["NCCL_DEBUG"],
                  "env_secrets": ["TF_TEST_SECRET"], "mpirun_extra_args": ["--mca", "btl_tcp_links", "2"]},
        "nproc_per_node": "auto", "master_port": 29500,
        "nodes": [{"inventory_hostname": host, "preflight_net": {"address": f"10.0.0.{i}", "interface": "eth0"},
                   "python_env_torchrun": "/env/bin/torchrun"} for i, host in enumerate(HOSTS)],
        "log_dir": "~/.torchfleet/runs", "group": "cluster", "group_hosts": HOSTS, "play_hosts": HOSTS,
        "mode": "torchrun", "head": "node0", "head_torchrun": "/env/bin/torchrun",
    }


def test_a_good_request_has_no_problem(request_):
    assert launch_problems(request_) == []


@pytest.mark.parametrize("mode, bind_to, refused", [
    ("torchrun", "core", True), ("mpich", "core", True), ("rank", "core", False), ("torchrun", "socket", False),
    ("torchrun", "numa", False), ("torchrun", "none", False)])
def test_binding_each_torchrun_to_one_core_is_refused_outside_rank_mode(request_, mode, bind_to, refused):
    request_.update(mode=mode, bind_to=bind_to, **({"mpich_launcher": "hydra"} if mode == "mpich" else {}))
    said = [problem for problem in launch_problems(request_) if problem.startswith("bind_to")]
    assert said == ([f"bind_to is core, but in {mode} mode mpirun starts one torchrun per node and its workers "
                     f"inherit the binding: every worker of a node would share one core. Use bind_to=socket or "
                     f"numa, or launch_mode=rank (one process a worker), or leave bind_to at none."] if refused else [])
    request_.update(mode="mpich", mpich_launcher="pals", bind_to="numa")
    assert [problem for problem in launch_problems(request_) if problem.startswith("bind_to")] == [
        "bind_to is numa, but through Cray PALS torchfleet starts each node's torchrun with --cpu-bind none, and "
        "PALS's binding is not mpirun's: leave bind_to at none."]


@pytest.mark.parametrize("mode, args, said", [
    ("torchrun", ["--nnodes=4"], "torchrun_extra_args: '--nnodes=4' overrides an option torchfleet sets"),
    ("rank", ["--monitor-interval=1"], "torchrun_extra_args: rank mode runs no torchrun"),
    ("torchrun", ["--monitor-interval=1"], None)])
def test_torchrun_extra_args_are_refused_on_the_controller_as_the_plan_refuses_them(request_, mode, args, said):
    request_["mode"] = mode
    request_["lists"]["torchrun_extra_args"] = args
    found = [problem for problem in launch_problems(request_) if problem.startswith("torchrun_extra_args")]
    assert [problem[:len(said)] for problem in found] == ([said] if said else [])


def test_stop_checks_only_the_setup_facts(request_):
    request_.update(action="stop", script="", master_port="abc")
    assert launch_problems(request_) == []
    del request_["nodes"][2]["preflight_net"]
    assert launch_problems(request_) == [
        "No setup facts for node2: run `ansible-playbook setup.yml -i INVENTORY` first (setup records "
        "them on each node, in /etc/ansible/facts.d/torchfleet.fact, and in Ansible's fact cache where "
        "one is configured)."]


@pytest.mark.parametrize("key", ["script_args", "files", "env_pass", "env_secrets", "mpirun_extra_args"])
@pytest.mark.parametrize("value", ["WANDB_API_KEY", {"a": 1}, 3])
def test_a_list_given_as_anything_else_is_said_alone(request_, key, value):
    request_["lists"][key] = value
    request_["master_port"] = 0  # also wrong, but the list comes first and alone
    problems = launch_problems(request_)
    assert len(problems) == 1 and problems[0].startswith(f"{key} must be a list, for example -e '{{\"{key}\": [")


def test_every_other_problem_is_named_at_once(request_):
    request_.update(script="missing.py", nproc_per_node="0", master_port=70000, log_dir="runs",
                    play_hosts=["node1", "node2"])
    request_["lists"].update(files=["data.csv", "nope.csv"], env_secrets=["TF_TEST_SECRET", "TF_TEST_UNSET"],
                             mpirun_extra_args=["--mca", "x", "y; rm -rf ~", "-np 4"])
    problems = launch_problems(request_)
    assert [p.split(" ")[0] for p in problems] == [
        "The", "These", "nproc_per_node", "master_port", "log_dir", "mpirun_extra_args", "These", "The"]
    assert "missing.py is not a file" in problems[0]
    assert problems[1] == "These files are not on the controller: nope.csv."
    assert "mpirun_extra_args holds 'y; rm -rf ~', '-np 4'" in problems[5]
    assert "environment: TF_TEST_UNSET." in problems[6]
    assert problems[7].startswith("The head node0 is left out of this run (by --limit or exclude)")


@pytest.mark.parametrize("limit, exclude, nodes", [
    (HOSTS, [], HOSTS), (["node0", "node2"], [], ["node0", "node2"]), (HOSTS, "node1, node2", ["node0"]),
    (["node0", "node1"], ["node1"], ["node0"])])
def test_limit_and_exclude_choose_the_runs_nodes_in_the_groups_order(request_, limit, exclude, nodes):
    request_.update(play_hosts=limit, exclude=exclude)
    assert launch_problems(request_) == []
    assert run_nodes(request_) == nodes


@pytest.mark.parametrize("exclude, said", [
    (["node9"], "exclude names node9, not a node of group 'cluster' (node0, node1, node2): give the names"),
    ("node0", "The head node0 is left out of this run (by --limit or exclude), but the head runs the launcher"),
    ({"node1": True}, "exclude is '{'node1': True}': give node names, as a list or joined by ','"),
])
def test_a_bad_exclude_is_named_with_its_fix(request_, exclude, said):
    request_["exclude"] = exclude
    problems = launch_problems(request_)
    assert len(problems) == 1 and problems[0].startswith(said), problems


def test_spares_are_counted_among_the_runs_nodes_not_the_groups(request_):
    request_.update(exclude=["node2"], restart={"max_restarts": 1, "spare_nodes": 1})
    assert launch_problems(request_) == []
    request_["restart"]["spare_nodes"] = 2
    assert any(problem.startswith("spare_nodes is 2, but the run has 2 node(s)") for problem in launch_problems(request_))


def test_shared_storage_looks_for_no_file_on_the_controller(request_):
    request_.update(script="/srv/train.py", shared_storage=True)
    request_["lists"]["files"] = ["/srv/data.csv"]
    assert launch_problems(request_) == []


@pytest.mark.parametrize("port,ok", [(1024, True), (65535, True), ("29500", True), (1023, False),
                                     (65536, False), ("-1", False), ("2e4", False)])
def test_port_range(request_, port, ok):
    request_["master_port"] = port
    assert (launch_problems(request_) == []) is ok


def test_nproc_per_node_that_differs_between_nodes_names_each_count(request_):
    for node, count in zip(request_["nodes"], (2, 1, 2)):
        node["nproc_per_node"] = count
    (problem,) = launch_problems(request_)
    assert problem.startswith("nproc_per_node differs between nodes (2 on node0, node2; 1 on node1)")


def test_torchrun_mode_needs_a_torchrun_rank_mode_does_not(request_):
    request_["head_torchrun"] = ""
    (problem,) = launch_problems(request_)
    assert problem.startswith("launch_mode=torchrun runs torchrun, but setup recorded none on node0")
    request_["mode"] = "rank"
    assert launch_problems(request_) == []


def test_launch_nodes_auto_is_the_gpu_count_or_one():
    node_vars = [
        {"inventory_hostname": "a", "preflight_net": {"address": "10.0.0.1", "interface": "ib0"},
         "preflight_gpu_count": 8},
        {"inventory_hostname": "b", "preflight_net": {"address": "10.0.0.2", "interface": "ib0"},
         "preflight_gpu_count": 0},
    ]
    assert launch_nodes(node_vars, "auto") == [
        {"name": "a", "address": "10.0.0.1", "interface": "ib0", "slots": 8},
        {"name": "b", "address": "10.0.0.2", "interface": "ib0", "slots": 1}]
    assert [node["slots"] for node in launch_nodes(node_vars, "2")] == [2, 2]


def test_files_over_the_limit_are_refused_with_the_largest_named(request_, tmp_path):
    (tmp_path / "big.bin").write_bytes(b"\0" * (16 * 2**20))
    request_["lists"]["files"] = ["data.csv", "big.bin"]
    problems = launch_problems(request_)
    assert len(problems) == 1
    assert problems[0].startswith("The script and its files come to 16.0 MiB (big.bin 16.0 MiB, ")
    assert "over the 16 MiB" in problems[0] and "shared_storage=true" in problems[0]
    request_["lists"]["files"] = ["big.bin"]  # 16 MiB and the tiny script: still over
    assert len(launch_problems(request_)) == 1
    (tmp_path / "big.bin").write_bytes(b"\0" * (16 * 2**20 - 100))
    assert launch_problems(request_) == []


PALS = {"mode": "mpich", "mpich_launcher": "pals", "head_mpiexec": "/opt/cray/pals/1.2/bin/mpiexec"}
HYDRA = {"mode": "mpich", "mpich_launcher": "hydra", "head_mpiexec": "/usr/bin/mpiexec.hydra"}


@pytest.mark.parametrize("change", [{"shared_storage": True}, PALS])
def test_the_size_limit_holds_only_where_the_module_carries_the_files(request_, tmp_path, change):
    (tmp_path / "big.bin").write_bytes(b"\0" * (17 * 2**20))
    request_["lists"]["files"] = ["big.bin"]
    request_.update(change)
    assert launch_problems(request_) == []


@pytest.mark.parametrize("given, said", [
    ("stop", "-e action=stop: Ansible reserves the name action; use -e launch_action=stop (or: torchfleet stop)."),
    ("start", "-e action=start: Ansible reserves the name action; use -e launch_action=start."),
])
def test_the_reserved_name_action_is_refused_alone(request_, given, said):
    request_["reserved_action"] = given
    request_["script"] = "/nonexistent.py"
    assert launch_problems(request_) == [said]


def test_the_checks_that_need_setups_facts_wait_while_they_are_read_back(request_):
    del request_["nodes"][2]["preflight_net"]
    request_["facts_pending"] = True
    assert launch_problems(request_) == []
    request_["master_port"] = "abc"
    assert "master_port" in " ".join(launch_problems(request_))  # the controller's own checks run first


def test_a_restart_needs_the_run_it_restarts(request_):
    request_.update(action="restart", run_id="", script="")
    assert launch_problems(request_) == [
        "launch_action=restart starts a run that ended again: name it with -e run_id=RUN_ID "
        "(torchfleet runs lists the runs)."]
    request_["run_id"] = "tf-20261125-231500-ab12cd"
    assert launch_problems(request_) == []  # no script: the run's own request is on the head


def test_hydra_carries_the_files_as_open_mpi_does(request_, tmp_path):
    (tmp_path / "big.bin").write_bytes(b"\0" * (17 * 2**20))
    request_["lists"]["files"] = ["big.bin"]
    request_.update(HYDRA)
    assert "over the 16 MiB" in launch_problems(request_)[0]


@pytest.mark.parametrize("change, said", [
    ({"mode": "mpich"}, "launch_mode=mpich runs MPICH's mpiexec, but setup recorded none on node0: run "
                        "`ansible-playbook setup.yml -i INVENTORY -e mpi_implementation=mpich` first"),
    ({**HYDRA, "mpich_launcher": ""}, "mpich_launcher is '': give hydra (MPICH's Hydra, Intel MPI) or pals"),
    ({**HYDRA, "mpich_launcher": "intel"}, "mpich_launcher is 'intel': give hydra"),
])
def test_mpich_mode_needs_what_setup_records(request_, change, said):
    request_.update(change)
    problems = launch_problems(request_)
    assert len(problems) == 1 and problems[0].startswith(said), problems
    request_.update(HYDRA)
    assert launch_problems(request_) == []


def test_without_mpich_launcher_the_flavour_setup_found_on_the_head_is_judged(request_, tmp_path):
    (tmp_path / "big.bin").write_bytes(b"\0" * (17 * 2**20))
    request_["lists"]["files"] = ["big.bin"]
    request_.update(PALS, mpich_launcher="", head_found_launcher="pals", bind_to="socket")
    assert [problem[:40] for problem in launch_problems(request_)] == [
        "bind_to is socket, but through Cray PALS"]  # PALS's rule, and no size limit (Ansible copies)
    request_.update(mpich_launcher="hydra")  # given: it wins over setup's
    assert "over the 16 MiB" in launch_problems(request_)[0]
    request_.update(mode="torchrun", mpich_launcher="", bind_to="none", head_mpirun="/usr/bin/mpirun.openmpi")
    request_["lists"]["files"] = []
    assert launch_problems(request_) == []  # setup's flavour is no choice of a run without mpiexec


def test_open_mpi_modes_refuse_a_head_with_mpich_alone(request_):
    request_.update(head_mpiexec="/usr/bin/mpiexec.hydra", mpich_launcher="hydra")
    problems = launch_problems(request_)
    assert len(problems) == 1 and problems[0].startswith(
        "launch_mode=torchrun runs Open MPI's mpirun, but setup installed MPICH alone on node0: use -e "
        "launch_mode=mpich"), problems
    request_["head_mpirun"] = "/usr/bin/mpirun.openmpi"  # both installed: fine
    assert launch_problems(request_) == []


def test_the_roles_variables_are_read_as_the_request_they_make(request_):
    """validate.yml hands the filter every launch_ variable as given; the table says which are
    options, and what it reads of them is the request the checks read."""
    lists = request_.pop("lists")
    variables = {"launch_action": "start", "launch_script": "missing.py", "launch_shared_storage": False,
                 **{f"launch_{key}": value for key, value in lists.items()},
                 "launch_nproc_per_node": "0", "launch_master_port": "70000", "launch_log_dir": "runs",
                 "launch_group": "cluster", "launch_mode": "torchrun", "launch_head": "node0",
                 "launch_scheduler": "none", "launch_slurm_partition": "gpu", "launch_max_restarts": "x",
                 "launch_result": {"not": "an option"}}
    play = {key: request_[key] for key in ("nodes", "group_hosts", "play_hosts", "head_torchrun")}
    nested = {**request_, "script": "missing.py", "nproc_per_node": "0", "master_port": "70000",
              "log_dir": "runs", "slurm": {"partition": "gpu"}, "scheduler": "none", "lists": lists,
              "restart": {"max_restarts": "x"}}
    found = launch_problems({"variables": variables, **play})
    assert found == launch_problems(nested)
    assert [line.split(" ")[0] for line in found] == [
        "The", "nproc_per_node", "master_port", "log_dir", "slurm_partition", "max_restarts"]
