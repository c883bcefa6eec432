"""Which output a command shows, as the head's follower takes it."""

import pytest

from torchfleet.cli.parser import build_parser
from torchfleet.cli.following import shown_ranks


@pytest.mark.parametrize("argv, ranks", [
    (["logs"], "0"),
    (["logs", "--all-ranks"], "all"),
    (["logs", "--rank", "3"], "rank:3"),
    (["logs", "--node", "gpu02"], "node:gpu02"),
    (["launch", "train.py", "--all-ranks"], "all"),
    (["wait"], "0"),
])
def test_the_ranks_shown_follow_the_commands_options(argv, ranks):
    assert shown_ranks(build_parser().parse_args(argv)) == ranks
