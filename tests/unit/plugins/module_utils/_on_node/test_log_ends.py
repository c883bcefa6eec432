"""log_ends.py: a log's last lines, each as it was left."""

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import log_ends


def test_the_last_lines_of_a_log_keep_a_bars_last_state_only():
    text = "start\n\r 10%\r 50%\r100%\nend\r\n"
    assert log_ends.last_lines(text, 20) == ["start", "100%", "end"]
    assert log_ends.last_lines("a\nb\nc", 2) == ["b", "c"]
