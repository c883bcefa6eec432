"""`torchfleet cluster`: a bad name is refused before Docker is asked anything."""

from torchfleet.cli.cluster import cluster_command
from torchfleet.cli.parser import build_parser


def test_a_bad_cluster_name_is_named_and_exits_1(capsys):
    rc = cluster_command(build_parser().parse_args(["cluster", "up", "--name=x;y"]))
    assert rc == 1
    assert "cluster name 'x;y' is not valid: use ASCII letters, digits and '-'" in capsys.readouterr().err
