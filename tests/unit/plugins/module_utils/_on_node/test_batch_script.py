"""The batch scripts' pieces (the scripts themselves: tests/unit/torchfleet/cli/test_render.py)."""

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.batch_script import command_lines


def test_command_lines_pair_options_with_their_values():
    raw = ["mpiexec", "-n", "2", "--ppn", "1", "--envall", "--mca", "a", "b", "-x", "N", "--tag-output",
           "/bin/sh", "-c", "exec x", "torchfleet", "--epochs", "3"]
    assert command_lines(raw, raw, "/bin/sh") == [
        "mpiexec", "-n 2", "--ppn 1", "--envall", "--mca a b", "-x N", "--tag-output",
        "/bin/sh -c exec x", "torchfleet --epochs 3"]
