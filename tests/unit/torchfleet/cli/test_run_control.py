"""`stop`, `wait`, `logs`: usage errors found before anything runs."""

import pytest

from torchfleet.cli.parser import build_parser
from torchfleet.cli.run_control import logs_command, stop_command
from torchfleet.cli.usage import UsageError


@pytest.mark.parametrize("argv, command, said", [
    (["stop", "tf-1", "--all"], stop_command, "give a run id or --all, not both"),
    (["stop", "a;b"], stop_command, "run id 'a;b' is not valid"),
    (["logs", "--rank", "-1"], logs_command, "--rank takes a rank (0 or more)"),
    (["logs", "--tail", "0"], logs_command, "--tail a number of lines (1 or more)"),
])
def test_bad_arguments_are_named_before_any_node_is_asked(argv, command, said):
    with pytest.raises(UsageError) as raised:
        command(build_parser().parse_args(argv))
    assert said in str(raised.value)
