"""launchers.py: each launcher behind one interface, chosen from the request alone; what each
refuses of a plan. Their argv and hostfiles are the renderer's goldens (test_renderer.py)."""

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import launchers
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.renderer import render
from plan_helpers import make_plan, node


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
