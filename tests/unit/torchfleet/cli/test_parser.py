"""The command's arguments."""

import pytest

from torchfleet.cli.launch import option_flags_given
from torchfleet.cli.parser import build_parser
from torchfleet.collection import module_util


def test_cluster_subcommand_still_parses():
    args = build_parser().parse_args(["cluster", "up", "--nodes", "2", "--name", "x"])
    assert (args.action, args.nodes, args.name) == ("up", 2, "x")


def test_the_launch_options_flags_come_from_the_option_table_and_pass_on_by_their_short_names(capsys):
    parser = build_parser()
    args = parser.parse_args(["launch", "train.py", "--max-restarts", "2", "--share-nodes", "--scheduler", "slurm"])
    assert option_flags_given(args) == {"max_restarts": 2, "share_nodes": True, "scheduler": "slurm"}
    assert option_flags_given(parser.parse_args(["launch", "train.py"])) == {}
    assert option_flags_given(parser.parse_args(["restart", "tf-1", "--min-nodes", "2"])) == {"min_nodes": 2}
    for wrong in (["restart", "tf-1", "--spare-nodes", "1"], ["launch", "t.py", "--scheduler", "pbs"],
                  ["launch", "t.py", "--max-restarts", "two"]):
        with pytest.raises(SystemExit):
            parser.parse_args(wrong)
    assert "invalid int value: 'two'" in capsys.readouterr().err
    # Each flag is the option's name, and reaches launch.yml by its -e name.
    flagged = [option for option in module_util("_launch_options").OPTIONS if option.cli]
    assert {option.name for option in flagged} == {"max_restarts", "min_nodes", "spare_nodes", "share_nodes", "scheduler",
                                                   "hang_timeout", "bind_to", "fault_tolerance"}
    assert all(option.short for option in flagged)


def test_render_takes_every_flag_launch_takes():
    parser = build_parser()
    given = ["--max-restarts", "1", "--min-nodes", "2", "--spare-nodes", "1", "--share-nodes", "--scheduler", "slurm",
             "--hang-timeout", "60", "--bind-to", "socket", "--fault-tolerance", "torchft"]
    launch, render = parser.parse_args(["launch", "t.py", *given]), parser.parse_args(["render", "t.py", *given])
    assert option_flags_given(render, "launch") == option_flags_given(launch) != {}
    assert option_flags_given(render, "launch")["bind_to"] == "socket"
    assert option_flags_given(render, "launch")["fault_tolerance"] == "torchft"


def test_every_help_fits_a_terminal_of_80_columns(monkeypatch):
    """argparse wraps to COLUMNS; what it cannot wrap (a usage line listing every command) must
    not be there."""
    monkeypatch.setenv("COLUMNS", "80")
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # pylint: disable=protected-access
    for name, command in [("torchfleet", parser), *commands.items()]:
        wide = [line for line in command.format_help().splitlines() if len(line) > 80]
        assert not wide, (name, wide)
