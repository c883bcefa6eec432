"""The wheelhouse's spread inside the cluster: hashes, the tree, and a real server and fetch on localhost."""

import hashlib
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils import _wheel_spread as spread


def wheel(directory, name, content):
    (directory / name).write_bytes(content)
    return {"file": name, "sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_check_names_missing_and_altered_wheels_and_rereads_only_what_was_written(tmp_path):
    good = wheel(tmp_path, "a-1-py3-none-any.whl", b"a" * 1000)
    bad = wheel(tmp_path, "b-1-py3-none-any.whl", b"b" * 1000)
    gone = {"file": "c-1-py3-none-any.whl", "sha256": "0" * 64, "size": 1}
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

    def __init__(self, directory, files, pending=False, idle_timeout=spread.IDLE_TIMEOUT):
        self.port = free_port()
        self.directory = directory
        ready = threading.Event()
        self.result = {}
        self.thread = threading.Thread(target=lambda: self.result.update(served=spread.serve(
            str(directory), files, "127.0.0.1", self.port, 60, pending, ready.set, idle_timeout)), daemon=True)
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
    w = {"file": "a-1-py3-none-any.whl", "sha256": "0" * 64, "size": 1}
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
            spread.fetch_wheels(str(tmp_path / ".."), [{"file": "secret.txt", "sha256": "0" * 64, "size": 2}],
                                [server.url], 5)
        listening = [line for line in open("/proc/net/tcp").read().splitlines()[1:]
                     if int(line.split()[1].split(":")[1], 16) == server.port and line.split()[3] == "0A"]
        assert [line.split()[1].split(":")[0] for line in listening] == ["0100007F"]  # 127.0.0.1 only
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------
# Under concurrency: two setups on one node, a source whose bytes change, clients gone silent
# ---------------------------------------------------------------------------------------------

MIB = 1 << 20


class Scripted:
    """A server on 127.0.0.1 whose answer to each GET is `answer(path)`: (length, the parts to
    send), the parts a generator that may wait on the test's events between two of them."""

    def __init__(self, answer):
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self):  # noqa: N802 (http.server's name)
                length, parts = answer(self.path)
                self.send_response(200)
                if length is not None:  # None: no length told, the answer ends where the connection does
                    self.send_header("Content-Length", str(length))
                self.end_headers()
                try:
                    for part in parts:
                        self.wfile.write(part)
                except OSError:
                    pass  # the client hung up (one cut off at its bound)

            def log_message(self, format, *args):  # noqa: A002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def paused(content, release):
    """An answer that sends the first MiB of `content`, waits for `release`, then sends the rest."""
    def answer(_path):
        def parts():
            yield content[:MIB]
            assert release.wait(20)
            yield content[MIB:]
        return len(content), parts()
    return answer


def partials(directory):
    """{name: bytes} of the temporary files in `directory`."""
    return {name: (directory / name).read_bytes() for name in os.listdir(directory) if name.endswith(spread.PARTIAL)}


def wait_for(predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def in_thread(target):
    """Run `target` in a thread; the thread's .outcome is ("ok", value) or ("error", exception)."""
    def run():
        try:
            thread.outcome = ("ok", target())
        except Exception as err:  # noqa: BLE001 (the test reads it)
            thread.outcome = ("error", err)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_two_fetches_of_one_wheel_at_once_each_write_their_own_file_and_neither_removes_the_other_s(tmp_path):
    content = os.urandom(2 * MIB)
    w = {"file": "a-1-py3-none-any.whl", "sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}
    release = threading.Event()
    source = Scripted(paused(content, release))
    try:
        def fetch():
            return spread.fetch_wheels(str(tmp_path), [w], [source.url], 30)
        fetches = [in_thread(fetch), in_thread(fetch)]
        # Both halfway: two temporary files, each of its own name, each with its download's first MiB.
        wait_for(lambda: len(partials(tmp_path)) == 2 and all(len(b) == MIB for b in partials(tmp_path).values()))
        names = sorted(partials(tmp_path))
        assert all(name.startswith(f".{w['file']}.") for name in names)
        # What a setup's end does: even aged past STALE_AFTER, a live download's file is locked, so kept.
        for name in names:
            os.utime(tmp_path / name, (time.time() - 3600, time.time() - 3600))
        assert spread.remove_stale(str(tmp_path)) == []
        assert sorted(partials(tmp_path)) == names
        release.set()
        for thread in fetches:
            thread.join(30)
            assert thread.outcome == ("ok", {source.url: 2 * MIB})
    finally:
        release.set()
        source.close()
    assert (tmp_path / w["file"]).read_bytes() == content
    assert partials(tmp_path) == {}


def test_bytes_that_change_mid_transfer_never_take_the_wheel_s_name_beside_a_good_fetch(tmp_path):
    content, other = os.urandom(2 * MIB), os.urandom(MIB)
    w = {"file": "a-1-py3-none-any.whl", "sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}
    good_release, changing_release = threading.Event(), threading.Event()
    # The changing source's file is replaced as it sends it: its first MiB is another build's.
    good, changing = Scripted(paused(content, good_release)), Scripted(paused(other + content[MIB:], changing_release))
    try:
        first = in_thread(lambda: spread.fetch_wheels(str(tmp_path), [w], [good.url], 30))
        wait_for(lambda: content[:MIB] in partials(tmp_path).values())
        second = in_thread(lambda: spread.fetch_wheels(str(tmp_path), [w], [changing.url], 30))
        wait_for(lambda: other in partials(tmp_path).values())
        # The good download ends while the changing one is halfway: its bytes, and only its, take the name.
        good_release.set()
        first.join(30)
        assert first.outcome == ("ok", {good.url: 2 * MIB})
        assert (tmp_path / w["file"]).read_bytes() == content
        changing_release.set()
        second.join(30)
        assert second.outcome[0] == "error" and isinstance(second.outcome[1], spread.SpreadError)
        assert f"{changing.url}{w['file']} sent {w['file']} with sha256 " in str(second.outcome[1])
    finally:
        good_release.set()
        changing_release.set()
        good.close()
        changing.close()
    assert (tmp_path / w["file"]).read_bytes() == content
    assert partials(tmp_path) == {}


def test_a_source_whose_bytes_change_is_hashed_as_written_and_leaves_nothing(tmp_path):
    content = os.urandom(2 * MIB)
    w = {"file": "a-1-py3-none-any.whl", "sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}
    (tmp_path / w["file"]).write_bytes(b"old")
    changing = Scripted(lambda _path: (len(content), iter([content[:MIB], os.urandom(MIB)])))
    try:
        with pytest.raises(spread.SpreadError, match="not the lock's"):
            spread.fetch_wheels(str(tmp_path), [w], [changing.url], 30)
    finally:
        changing.close()
    assert (tmp_path / w["file"]).read_bytes() == b"old"  # untouched: nothing unhashed took its name
    assert partials(tmp_path) == {}


def test_only_the_files_of_dead_writers_are_removed_and_only_once_old(tmp_path):
    old = time.time() - 2 * spread.STALE_AFTER

    def aged(name, when=old):
        (tmp_path / name).write_bytes(b"x")
        os.utime(tmp_path / name, (when, when))
    aged(".a.whl.dead0001.partial")  # its writer was killed: no lock, old
    aged("a.whl.partial")  # an earlier torchfleet's fixed name, left by a killed fetch
    aged(".a.whl.young001.partial", time.time())  # made this instant: maybe not locked yet
    aged("b-1-py3-none-any.whl")  # a wheel, not a temporary file
    (tmp_path / ".c.whl.dir00001.partial").mkdir()  # not a file: not ours to judge
    # A live writer in another process: its file is locked for as long as it runs.
    script = ("import sys, time; from ansible_collections.torchfleet.cluster.plugins.module_utils import "
              "_wheel_spread as s; print(s.temporary(sys.argv[1], 'd.whl')[1], flush=True); time.sleep(60)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    writer = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        live = os.path.basename(writer.stdout.readline().strip())
        os.utime(tmp_path / live, (old, old))
        assert sorted(spread.remove_stale(str(tmp_path))) == [".a.whl.dead0001.partial", "a.whl.partial"]
        kept = [".a.whl.young001.partial", "b-1-py3-none-any.whl", ".c.whl.dir00001.partial", live]
        assert sorted(os.listdir(tmp_path)) == sorted(kept)
    finally:
        writer.kill()
        writer.wait()
    # Killed: its lock went with it, and its file is now a dead writer's.
    assert spread.remove_stale(str(tmp_path)) == [live]


def test_the_record_of_verified_hashes_is_written_through_a_file_of_its_own(tmp_path):
    spread.write_verified(str(tmp_path), {"a.whl": [1, 2, "f" * 64]})
    spread.write_verified(str(tmp_path), {"b.whl": [1, 2, "e" * 64]})
    assert spread.read_verified(str(tmp_path)) == {"b.whl": [1, 2, "e" * 64]}
    assert os.listdir(tmp_path) == [spread.VERIFIED]
    assert oct(os.stat(tmp_path / spread.VERIFIED).st_mode & 0o777) == "0o644"


def handler_threads():
    return [t for t in threading.enumerate() if "process_request_thread" in t.name and t.is_alive()]


def test_an_idle_connection_is_closed_after_the_timeout_while_the_server_serves_on(tmp_path):
    served, child = tmp_path / "served", tmp_path / "child"
    served.mkdir()
    child.mkdir()
    w = wheel(served, "a-1-py3-none-any.whl", os.urandom(300_000))
    server = Server(served, [w["file"]], idle_timeout=0.5)
    try:
        silent = socket.create_connection(("127.0.0.1", server.port))  # sends nothing
        halfway = socket.create_connection(("127.0.0.1", server.port))
        halfway.sendall(b"GET /a-1-py3-none-any.whl HTTP/1.0\r\n")  # and never ends its request
        # Meanwhile the server serves others.
        assert spread.fetch_wheels(str(child), [w], [server.url], 10) == {server.url: 300_000}
        started = time.monotonic()
        for idle in (silent, halfway):
            idle.settimeout(10)
            assert idle.recv(1024) == b""  # closed by the server
            idle.close()
        assert time.monotonic() - started < 3
        wait_for(lambda: not handler_threads(), 5)  # their threads ended with them
        os.unlink(child / w["file"])
        assert spread.fetch_wheels(str(child), [w], [server.url], 10) == {server.url: 300_000}
    finally:
        server.stop()


class SmallBuffers(ThreadingHTTPServer):
    """The wheel server with small send buffers (its connections inherit them), so that its sends
    wait on a slow client, as they do for any wheel much larger than a socket's buffers."""

    def server_bind(self):
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32 * 1024)
        super().server_bind()


def test_a_slow_download_that_still_moves_is_not_cut_by_the_idle_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(spread, "ThreadingHTTPServer", SmallBuffers)
    content = os.urandom(3 * MIB // 2)
    w = wheel(tmp_path, "a-1-py3-none-any.whl", content)
    server = Server(tmp_path, [w["file"]], idle_timeout=0.5)
    try:
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        client.connect(("127.0.0.1", server.port))
        client.settimeout(10)
        client.sendall(f"GET /{w['file']} HTTP/1.0\r\n\r\n".encode())
        received, started = bytearray(), time.monotonic()
        while chunk := client.recv(64 * 1024):  # slowly: a MiB takes more than twice the timeout
            received += chunk
            time.sleep(0.02)
        client.close()
        took = time.monotonic() - started
    finally:
        server.stop()
    assert received.split(b"\r\n\r\n", 1)[1] == content
    assert took > 2 * 0.5, took  # slower than the timeout, all along
    assert server.result["served"] == {"127.0.0.1": len(content)}


# ---------------------------------------------------------------------------------------------
# A source that sends more than the lock's size: cut off at that size, never filling the disk
# ---------------------------------------------------------------------------------------------

def test_a_source_that_sends_more_than_the_lock_s_size_is_cut_off_at_it_and_leaves_nothing(tmp_path, monkeypatch):
    removed = {}  # the partial file's size when it was removed
    remove = spread._remove
    monkeypatch.setattr(spread, "_remove", lambda path: (removed.update({path: os.path.getsize(path)}), remove(path)))
    content = os.urandom(MIB)
    w = {"file": "a-1-py3-none-any.whl", "sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}
    release, sent = threading.Event(), []

    def endless(_path):  # no length told; twice the wheel, then it waits before sending more
        def parts():
            sent.append(2 * MIB)
            yield content + os.urandom(MIB)
            release.wait(20)
            while True:
                sent.append(MIB)
                yield os.urandom(MIB)
        return None, parts()
    source = Scripted(endless)
    try:
        fetch = in_thread(lambda: spread.fetch_wheels(str(tmp_path), [w], [source.url], 30))
        # Ended while the source still holds the rest back: it stopped at the bound, not at the end.
        fetch.join(10)
        assert not fetch.is_alive(), "the download went on past the lock's size"
        assert sent == [2 * MIB]  # the rest still held back
    finally:
        release.set()
        source.close()
    assert fetch.outcome[0] == "error" and isinstance(fetch.outcome[1], spread.SpreadError)
    assert str(fetch.outcome[1]) == (
        f"{w['file']} could not be fetched: {source.url}: {source.url}{w['file']} sent {w['file']} longer than "
        f"the lock's {MIB} bytes (byte {MIB + 1} arrived): stopped there, nothing of it kept")
    assert os.listdir(tmp_path) == []  # neither the wheel nor the partial file
    assert list(removed.values()) == [MIB]  # it never held more than the lock's size


def test_a_source_that_announces_more_than_the_lock_s_size_is_refused_and_the_next_one_asked(tmp_path):
    good, child = tmp_path / "good", tmp_path / "child"
    good.mkdir()
    child.mkdir()
    w = wheel(good, "a-1-py3-none-any.whl", os.urandom(1000))
    release = threading.Event()

    def big(_path):  # a TiB announced, and nothing sent until the test ends
        def parts():
            release.wait(20)
            yield b"x" * 10
        return 1 << 40, parts()
    liar, server = Scripted(big), Server(good, [w["file"]])
    try:
        got = in_thread(lambda: spread.fetch_wheels(str(child), [w], [liar.url, server.url], 30))
        got.join(10)
        assert got.outcome == ("ok", {liar.url: 0, server.url: 1000})
        assert (child / w["file"]).read_bytes() == (good / w["file"]).read_bytes()
        os.unlink(child / w["file"])
        with pytest.raises(spread.SpreadError) as err:
            spread.fetch_wheels(str(child), [w], [liar.url], 10)
    finally:
        release.set()
        liar.close()
        server.stop()
    assert str(err.value) == (f"{w['file']} could not be fetched: {liar.url}: {liar.url}{w['file']} announces "
                              f"{1 << 40} bytes for {w['file']}, more than the lock's 1000: nothing of it written")
    assert os.listdir(child) == []
