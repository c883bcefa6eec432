"""The wheelhouse's spread inside the cluster: hashes, the tree, and a real server and fetch on localhost."""

import hashlib
import os
import socket
import threading
import time

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils import _wheel_spread as spread


def wheel(directory, name, content):
    (directory / name).write_bytes(content)
    return {"file": name, "sha256": hashlib.sha256(content).hexdigest()}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_check_names_missing_and_altered_wheels_and_rereads_only_what_was_written(tmp_path):
    good = wheel(tmp_path, "a-1-py3-none-any.whl", b"a" * 1000)
    bad = wheel(tmp_path, "b-1-py3-none-any.whl", b"b" * 1000)
    gone = {"file": "c-1-py3-none-any.whl", "sha256": "0" * 64}
    missing, corrupt, verified = spread.check_wheels(str(tmp_path), [good, bad, gone])
    assert missing == [gone["file"]] and corrupt == []
    spread.write_verified(str(tmp_path), verified)

    # Altered by hand, same size: its mtime changed, so it is read again and named.
    time.sleep(0.01)
    (tmp_path / bad["file"]).write_bytes(b"x" * 1000)
    missing, corrupt, verified = spread.check_wheels(str(tmp_path), [good, bad, gone])
    assert missing == [bad["file"], gone["file"]]
    assert corrupt == [f"{bad['file']}: sha256 {hashlib.sha256(b'x' * 1000).hexdigest()[:16]}... is not the "
                       f"lock's {bad['sha256'][:16]}... (altered or damaged on this node)"]
    assert list(verified) == [good["file"]]

    # An unchanged file is trusted from the record, not read: the record is what says so.
    record = spread.read_verified(str(tmp_path))
    record[good["file"]][2] = "f" * 64
    spread.write_verified(str(tmp_path), record)
    assert spread.check_wheels(str(tmp_path), [good])[0] == [good["file"]]


@pytest.mark.parametrize("count, fanout, depth", [(1, 2, 1), (3, 2, 2), (7, 2, 3), (15, 2, 4), (63, 2, 6), (999, 3, 6)])
def test_the_tree_grows_with_the_logarithm_of_the_nodes(count, fanout, depth):
    nodes = [f"n{i}" for i in range(1, count + 1)]
    parents = spread.spread_tree("n0", nodes, fanout)
    assert set(parents) == set(nodes)
    children = {}
    for node, parent in parents.items():
        children.setdefault(parent, []).append(node)
    assert max(len(c) for c in children.values()) <= fanout

    def level(node):
        return 0 if node == "n0" else 1 + level(parents[node])
    assert max(level(node) for node in nodes) == depth


def test_the_seed_is_no_receiver_and_a_bad_fanout_is_refused():
    assert spread.spread_tree("n0", ["n0", "n2", "n1"]) == {"n2": "n0", "n1": "n0"}
    assert spread.spread_tree("n0", []) == {}
    with pytest.raises(ValueError):
        spread.spread_tree("n0", ["n1"], 0)


class Server:
    """spread.serve in a thread, as the wheel_server module runs it."""

    def __init__(self, directory, files, pending=False):
        self.port = free_port()
        self.directory = directory
        ready = threading.Event()
        self.result = {}
        self.thread = threading.Thread(target=lambda: self.result.update(served=spread.serve(
            str(directory), files, "127.0.0.1", self.port, 60, pending, ready.set)), daemon=True)
        self.thread.start()
        assert ready.wait(10)
        self.url = f"http://127.0.0.1:{self.port}/"

    def stop(self):
        os.unlink(self.directory / spread.SERVING)
        self.thread.join(10)
        assert not self.thread.is_alive()
        assert not spread.listening("127.0.0.1", self.port)


def test_a_child_fetches_from_its_parent_while_the_parent_still_fetches(tmp_path):
    seed, parent, child = (tmp_path / name for name in ("seed", "parent", "child"))
    for directory in (seed, parent, child):
        directory.mkdir()
    wheels = [wheel(seed, f"w{i}-1-py3-none-any.whl", os.urandom(300_000)) for i in range(3)]
    files = [w["file"] for w in wheels]
    seed_server = Server(seed, files)
    parent_server = Server(parent, files, pending=True)  # says "ask again" until its fetch ends
    try:
        got = {}
        fetch = threading.Thread(target=lambda: got.update(spread.fetch_wheels(
            str(child), wheels, [parent_server.url, seed_server.url], 30, wait=0.05)))
        fetch.start()
        time.sleep(0.3)
        assert fetch.is_alive() and not os.listdir(child)  # waiting on the parent, not the seed
        assert spread.fetch_wheels(str(parent), wheels, [seed_server.url], 30) == {seed_server.url: 900_000}
        os.unlink(parent / spread.FETCHING)
        fetch.join(30)
        assert got == {parent_server.url: 900_000, seed_server.url: 0}
        for w in wheels:
            assert hashlib.sha256((child / w["file"]).read_bytes()).hexdigest() == w["sha256"]
    finally:
        parent_server.stop()
        seed_server.stop()
    assert parent_server.result["served"] == {"127.0.0.1": 900_000}
    assert not (parent / spread.FETCHING).exists()


def test_a_source_that_lacks_a_wheel_or_sends_other_bytes_is_passed_over(tmp_path):
    seed, odd, child = (tmp_path / name for name in ("seed", "odd", "child"))
    for directory in (seed, odd, child):
        directory.mkdir()
    good = wheel(seed, "a-1-py3-none-any.whl", b"good" * 1000)
    (odd / good["file"]).write_bytes(b"evil" * 1000)
    other = wheel(seed, "b-1-py3-none-any.whl", b"other")
    servers = [Server(odd, [good["file"], other["file"]]), Server(seed, [good["file"], other["file"]])]
    try:
        got = spread.fetch_wheels(str(child), [good, other], [servers[0].url, servers[1].url], 30)
        assert got == {servers[0].url: 0, servers[1].url: 4000 + 5}
        assert (child / good["file"]).read_bytes() == b"good" * 1000
        assert not [name for name in os.listdir(child) if name.endswith(spread.PARTIAL)]
    finally:
        for server in servers:
            server.stop()


def test_no_source_with_the_wheel_names_the_wheel_and_each_reason(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    w = {"file": "a-1-py3-none-any.whl", "sha256": "0" * 64}
    server = Server(empty, [w["file"]])
    closed = free_port()  # nothing listens there
    try:
        with pytest.raises(spread.SpreadError) as err:
            spread.fetch_wheels(str(tmp_path), [w], [server.url, f"http://127.0.0.1:{closed}/"], 30, wait=0.01)
    finally:
        server.stop()
    assert str(err.value) == (f"a-1-py3-none-any.whl could not be fetched: {server.url}: HTTP 404 from "
                              f"{server.url}a-1-py3-none-any.whl; http://127.0.0.1:{closed}/: connection refused")


def test_the_server_serves_only_the_lock_s_wheels_on_its_address(tmp_path):
    (tmp_path / "secret.txt").write_text("no")
    w = wheel(tmp_path, "a-1-py3-none-any.whl", b"a")
    server = Server(tmp_path, [w["file"]])
    try:
        with pytest.raises(spread.SpreadError, match="HTTP 404"):
            spread.fetch_wheels(str(tmp_path / ".."), [{"file": "secret.txt", "sha256": "0" * 64}], [server.url], 5)
        listening = [line for line in open("/proc/net/tcp").read().splitlines()[1:]
                     if int(line.split()[1].split(":")[1], 16) == server.port and line.split()[3] == "0A"]
        assert [line.split()[1].split(":")[0] for line in listening] == ["0100007F"]  # 127.0.0.1 only
    finally:
        server.stop()
