"""ssh_to_nodes.py: the head's ssh to the other nodes, with a stand-in for ssh: the clean-up after a
failed run, and the closing of the ssh masters."""

import json
import time

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import ssh_to_nodes, report
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import Node

NODES = [Node("head", "10.0.0.1", 4), Node("w1", "10.0.0.2", 2), Node("w2", "10.0.0.3", 2)]


def test_the_clean_up_after_a_failed_run_names_what_it_ended_and_the_silent_nodes(tmp_path):
    # A stand-in for ssh: w1 had two processes of the run left, w2 is cut off (the message ssh
    # printed for a node disconnected from the local cluster's network), w3 never answers; the
    # head swept itself and is not asked.
    fake = tmp_path / "ssh"
    request = tmp_path / "request"
    fake.write_text('#!/bin/sh\n'
                    f'cat > {request}\n'
                    'case "$*" in\n'
                    '  *10.0.0.1*) exit 99 ;;\n'
                    '  *10.0.0.2*) echo \'{"stopped": [{"pid": 41}, {"pid": 42}], "survivors": []}\' ;;\n'
                    '  *10.0.0.3*) echo "ssh: connect to host 10.0.0.3 port 22: No route to host" >&2\n'
                    '              exit 255 ;;\n'
                    '  *10.0.0.4*) exec sleep 30 ;;\n'
                    'esac\n')
    fake.chmod(0o755)
    nodes = NODES + [Node("w3", "10.0.0.4", 2)]
    started = time.monotonic()
    ended = ssh_to_nodes.end_run_on_nodes(nodes, "head", str(fake), "python3", "r1", grace=3, timeout=2)
    assert time.monotonic() - started < 10  # bounded by `timeout`, not by the hung node
    assert json.loads(request.read_text()) == {"stop": {"run_id": "r1", "grace": 3}}
    assert ended == {
        "stopped": {"w1": [41, 42]}, "survivors": {},
        "silent": [{"name": "w2", "address": "10.0.0.3",
                    "error": "ssh: connect to host 10.0.0.3 port 22: No route to host"},
                   {"name": "w3", "address": "10.0.0.4", "error": "no answer within 2 s"}]}
    said = report.cleanup_message(ended)
    assert said.startswith("; could not reach w2, w3 to end what is left of the run there")
    assert "launch.yml -e launch_action=stop" in said
    assert report.cleanup_message(ended, name_silent=False) == ""  # a timeout's message names them
    assert "survived SIGKILL on w1: 41" in report.cleanup_message(
        {"stopped": {}, "survivors": {"w1": [41]}, "silent": []})


def test_closing_the_masters_asks_each_to_exit_and_removes_their_directory(tmp_path):
    fake = tmp_path / "ssh"
    calls = tmp_path / "calls"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    fake.chmod(0o755)
    control_dir = tmp_path / "masters"
    control_dir.mkdir()
    (control_dir / "0123abcd").touch()  # a master's socket
    ssh_to_nodes.close_ssh_masters(str(fake), str(control_dir), ["10.0.0.2", "10.0.0.3"])
    assert sorted(calls.read_text().splitlines()) == [
        f"-o ControlPath={control_dir}/%C -O exit 10.0.0.2", f"-o ControlPath={control_dir}/%C -O exit 10.0.0.3"]
    assert not control_dir.exists()
    empty = tmp_path / "none"
    empty.mkdir()
    ssh_to_nodes.close_ssh_masters(None, str(empty), ["10.0.0.2"])  # no ssh: nothing to ask
    assert not empty.exists()
