"""The command's arguments."""

from torchfleet.cli.parser import build_parser


def test_cluster_subcommand_still_parses():
    args = build_parser().parse_args(["cluster", "up", "--nodes", "2", "--name", "x"])
    assert (args.action, args.nodes, args.name) == ("up", 2, "x")
