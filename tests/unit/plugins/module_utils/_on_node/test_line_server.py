"""line_server.py: a node's worker files sent to the head's follower, run alone as the follower
sends it (`python3 -S -c`, the standard library alone), on real files of this machine."""

import subprocess
import sys

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import ssh_to_nodes, line_server


def test_the_line_server_sends_the_pieces_it_finds_then_the_rest_once_its_stdin_closes(tmp_path):
    log = tmp_path / "r1_x" / "attempt_0" / "1" / "stdout.log"
    log.parent.mkdir(parents=True)
    log.write_text("one\ntwo, no newline")
    program = ssh_to_nodes.program(line_server.PROGRAM, "line_server")
    with subprocess.Popen([sys.executable, "-S", "-c", program, "serve", str(tmp_path), "start"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={"PATH": "/usr/bin:/bin"}) as proc:
        # Its version first, then what the files hold now (the open line as a drawing), then that it
        # has caught up with them.
        said = [proc.stdout.readline() for _line in range(4)]
        assert said == [line_server.SERVE_HELLO, b"1 o L one\n", b"1 o R two, no newline\n", line_server.CAUGHT_UP]
        proc.stdin.close()  # the run has ended: the open line's end, and exit
        assert proc.stdout.read() == b"1 o D two, no newline\n"
        assert proc.wait(timeout=30) == 0


def test_the_line_server_says_how_it_is_run(capsys):
    assert line_server.main(["follow", "somewhere"]) == 2
    assert "usage: serve WORKERS_DIR" in capsys.readouterr().err
