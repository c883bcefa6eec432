"""launchers.py: each launcher behind one interface, chosen from the request alone; what each
refuses of a plan. Their argv and hostfiles are the renderer's goldens (test_renderer.py)."""

from pathlib import Path

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import launchers
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.renderer import render
from plan_helpers import make_plan, node

CAPTURED = Path(__file__).resolve().parents[2] / "modules" / "captured"  # real launchers' output


@pytest.mark.parametrize("given, chosen", [
    (dict(mode="torchrun"), launchers.OPEN_MPI), (dict(mode="rank"), launchers.OPEN_MPI),
    (dict(mode="mpich", mpich_launcher="hydra"), launchers.HYDRA),
    (dict(mode="mpich", mpich_launcher="pals"), launchers.PALS),
])
def test_the_request_alone_chooses_its_launcher(given, chosen):
    plan = make_plan(**given)
    assert launchers.launcher_of(plan.request) is chosen
    rendered = render(plan)
    assert rendered.hostfile == chosen.hostfile([node(1), node(2), node(3)])
    assert chosen.node_rank in rendered.argv[-2] if given["mode"] != "rank" else True


def test_only_open_mpi_keeps_its_daemons_alive_with_keepalive_and_takes_per_rank_logs():
    assert [launcher.keepalive for launcher in (launchers.OPEN_MPI, launchers.HYDRA, launchers.PALS)] == [
        True, False, False]
    assert "needs Open MPI's --output-filename" in launchers.HYDRA.problem(
        make_plan(mode="mpich", mpich_launcher="hydra", log_dir="/r/ranks"))
    assert launchers.OPEN_MPI.problem(make_plan(log_dir="/r/ranks")) is None
    assert launchers.PALS.problem(make_plan(mode="mpich", tree_spawn=True)) == (
        "tree_spawn is an Open MPI option; leave it unset in mpich mode")


def test_a_launcher_choice_that_names_none_is_refused_with_its_fix():
    assert launchers.choice_problem("mpich", "slurm").startswith(
        "mpich_launcher is 'slurm': give hydra (MPICH's Hydra, Intel MPI) or pals (HPE Cray PALS), or leave it unset")
    assert launchers.choice_problem("mpich", None).startswith("mpich_launcher is '': ")
    assert launchers.choice_problem("torchrun", "hydra") == (
        "mpich_launcher applies to mpich mode only; leave it unset in torchrun mode")
    assert launchers.choice_problem("torchrun", None) is None and launchers.choice_problem("mpich", "pals") is None


def test_hydra_names_the_failed_node_and_a_signal_as_128_plus_n_and_open_mpi_leaves_it_to_the_report():
    # Hydra's EXIT CODE for a signal is the signal's number; its EXIT STRING says it was one.
    assert launchers.HYDRA.failure((CAPTURED / "hydra_signal15.log").read_text()) == {
        "host": "localhost", "exit_code": 143}
    # Without the EXIT STRING (mpiexec aborted first), the code is all there is.
    assert launchers.PALS.failure((CAPTURED / "hydra_torchrun_killed.log").read_text()) == {
        "host": "172.18.0.3", "exit_code": 9}
    assert launchers.HYDRA.failure((CAPTURED / "rank_signal9.log").read_text()) is None
    assert launchers.OPEN_MPI.failure((CAPTURED / "hydra_signal15.log").read_text()) is None


def test_what_differs_between_launchers_is_said_by_each():
    assert [(launcher.setup_fact, launcher.restarts, launcher.run_as_root_flag, launcher.slurm_args,
             launcher.rides_ssh_masters) for launcher in (launchers.OPEN_MPI, launchers.HYDRA, launchers.PALS)] == [
        ("openmpi_mpirun", True, True, ("--mca", "plm", "slurm"), True), ("mpich_mpiexec", False, False, None, False),
        ("mpich_mpiexec", False, False, None, False)]
    assert launchers.launcher_named("mpich", "hydra") is launchers.HYDRA
    assert launchers.launcher_named("rank", None) is launchers.OPEN_MPI
    assert (launchers.flavour("mpich", None, "hydra"), launchers.flavour("mpich", "pals", "hydra"),
            launchers.flavour("torchrun", "pals", "hydra")) == ("hydra", "pals", None)


def test_what_setup_left_out_on_the_head_is_said_by_the_launcher_that_needs_it():
    both = {"openmpi_mpirun": "/usr/bin/mpirun.openmpi", "mpich_mpiexec": "/usr/bin/mpiexec.hydra"}
    assert [launcher.setup_problem("n0", "torchrun", both) for launcher in (
        launchers.OPEN_MPI, launchers.HYDRA, launchers.PALS)] == [None, None, None]
    assert launchers.OPEN_MPI.setup_problem("n0", "rank", {"mpich_mpiexec": both["mpich_mpiexec"]}).startswith(
        "launch_mode=rank runs Open MPI's mpirun, but setup installed MPICH alone on n0")
    assert launchers.OPEN_MPI.setup_problem("n0", "rank", {}) is None  # the PATH's mpirun, as before setup recorded it
    assert launchers.HYDRA.setup_problem("n0", "mpich", {"openmpi_mpirun": "/usr/bin/mpirun"}).startswith(
        "launch_mode=mpich runs MPICH's mpiexec, but setup recorded none on n0")


def test_where_the_launchers_keep_output_and_reach_nodes():
    assert [(launcher.rank_files, launcher.over_ssh, launcher.binds)
            for launcher in (launchers.OPEN_MPI, launchers.HYDRA, launchers.PALS)] == [
        (True, True, True), (False, True, True), (False, False, False)]
    # Before the flavour is checked, mpich mode's is Hydra's: over ssh, as a request names none.
    assert launchers.launcher_named("mpich", None) is launchers.HYDRA
