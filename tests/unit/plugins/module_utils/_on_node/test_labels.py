"""labels.py: which rank and node wrote each line of launcher.log (Open MPI's, Hydra's and
torchrun's tags), and the lines a follower shows for each choice of ranks (pure logic)."""

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import labels

from run_helpers import TORCHRUN

RANK = {"nodes": ["n0", "n1"], "slots": [2, 3], "mode": "rank", "nproc": 2}


@pytest.mark.parametrize("line, expected", [
    # torchrun mode: Open MPI's tag names the node, torchrun's the local rank.
    ("[1,1]<stdout>:[default1]:epoch 1", (3, "n1", "epoch 1")),
    ("[1,0]<stdout>:[default0]:hello", (0, "n0", "hello")),
    ("[1,2]<stderr>:[default0]:Traceback", (4, "n2", "Traceback")),
    # torchrun's own line on a node: no rank.
    ("[1,2]<stderr>:W1123 torch/distributed/run.py:874] ***", (None, "n2", "W1123 torch/distributed/run.py:874] ***")),
    # mpirun's own words: neither.
    ("mpirun noticed that process rank 1 ...", (None, None, "mpirun noticed that process rank 1 ...")),
    ("", (None, None, "")),
])
def test_labelled_torchrun_mode(line, expected):
    assert labels.labelled(line, TORCHRUN) == expected


def test_labelled_hydra_tags_name_the_node_and_torchrun_the_worker():
    hydra = dict(TORCHRUN, mode="mpich")
    assert labels.labelled("[1] [default1]:epoch 1", hydra) == (3, "n1", "epoch 1")
    assert labels.labelled("[2] W1123 torchrun says", hydra) == (None, "n2", "W1123 torchrun says")
    assert labels.labelled("[mpiexec@node0] main: error", hydra) == (None, None, "[mpiexec@node0] main: error")
    assert labels.untagged(["[0] [default0]:zero", "[1,0]<stdout>:[3] kept"]) == ["[default0]:zero", "[3] kept"]


def test_labelled_rank_mode_maps_ranks_to_nodes_by_slots():
    assert labels.labelled("[1,0]<stdout>:a", RANK) == (0, "n0", "a")
    assert labels.labelled("[1,1]<stdout>:b", RANK) == (1, "n0", "b")
    assert labels.labelled("[1,2]<stdout>:c", RANK) == (2, "n1", "c")
    assert labels.labelled("[1,4]<stdout>:d", RANK) == (4, "n1", "d")
    assert labels.labelled("[1,9]<stdout>:e", RANK) == (9, None, "e")  # beyond the slots: no node


def test_open_mpis_setpgid_warning_is_never_shown_nor_quoted():
    # Open MPI 4.1's rsh launcher, in the middle of a healthy run (tests/unit/plugins/modules/captured).
    noise = "[node0:06697] plm:rsh: Warning: setpgid(6714,6714) failed in parent with errno=Permission denied(13)"
    assert {labels.shown(noise, TORCHRUN, ranks) for ranks in ("0", "all", "node:n0")} == {None}
    assert labels.untagged([noise, "[1,0]<stdout>:after it"]) == ["after it"]
    # Not every warning of the launcher's: another errno, or another message, is shown.
    other = noise.replace("Permission denied(13)", "No such process(3)")
    assert labels.shown(other, TORCHRUN, "0") == other


def test_shown_rank0_all_and_none():
    lines = ["[1,0]<stdout>:[default0]:zero", "[1,0]<stdout>:[default1]:one", "[1,1]<stdout>:[default0]:two",
             "[1,1]<stderr>:torchrun says", "mpirun: a node is gone"]
    assert [labels.shown(line, TORCHRUN, "0") for line in lines] == ["zero", None, None, None, "mpirun: a node is gone"]
    assert [labels.shown(line, TORCHRUN, "all") for line in lines] == [
        "[rank 0 n0] zero", "[rank 1 n0] one", "[rank 2 n1] two", "[n1] torchrun says", "mpirun: a node is gone"]
    assert {labels.shown(line, TORCHRUN, "none") for line in lines} == {None}
