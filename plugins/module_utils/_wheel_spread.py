"""The wheelhouse inside the cluster: verified by sha256, spread from node to node over HTTP.

The controller sends the wheels once, to one node (the seed). The other nodes fetch them from a
parent in a tree rooted at the seed (spread_tree), each file checked against the lock's sha256,
so a node that holds the wheels serves them to its children while its own parent still serves
it: the controller's traffic does not grow with the node count, and the depth of the tree (the
time) grows with its logarithm.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from stat import S_ISREG

from ansible.module_utils.urls import open_url

# In the node's wheelhouse directory, beside the wheels.
VERIFIED = ".torchfleet-verified.json"  # {file: [size, mtime_ns, sha256]}: hashes already checked
SERVING = ".torchfleet-serving"  # exists while a server runs here; removing it stops the server
FETCHING = ".torchfleet-fetching"  # exists while this node still fetches: "ask again" to its children
PARTIAL = ".partial"  # the end of every temporary file's name: ".NAME.RANDOM.partial", one per writer
STALE_AFTER = 60  # seconds: a writer locks its temporary file the moment after it made it
IDLE_TIMEOUT = 30  # seconds a client of the server may send nothing and read nothing
BLOCK = 1 << 20


class SpreadError(Exception):
    """A wheel that could not be had, with the reason, for the module's message."""


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def read_verified(directory: str) -> dict:
    try:
        with open(os.path.join(directory, VERIFIED)) as handle:
            found = json.load(handle)
        return found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        return {}


def temporary(directory: str, name: str) -> tuple[int, str]:
    """(fd, path) of a new empty file of this writer's own in `directory`, to become `name` by a
    rename: its name is unique (two setups on one node never share one), and it stays locked
    while the fd is open, which tells remove_stale that its writer still lives."""
    fd, path = tempfile.mkstemp(prefix=f".{name.lstrip('.')}.", suffix=PARTIAL, dir=directory)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide the wheels from the training account
    except BaseException:
        os.close(fd)
        _remove(path)
        raise
    return fd, path


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def remove_stale(directory: str) -> list:
    """Remove the temporary files left by writers that died (killed before they could remove
    their own): those whose lock is free and that are older than STALE_AFTER. Another writer's
    live file is locked, so it is never taken; one made this instant may not be locked yet, so
    it is too young to be taken. Returns the names removed."""
    removed = []
    for name in os.listdir(directory):
        if not name.endswith(PARTIAL):
            continue
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue  # renamed into place or removed meanwhile, or not a file to open
        try:
            found = os.fstat(fd)
            if not S_ISREG(found.st_mode) or time.time() - found.st_mtime < STALE_AFTER:
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(path)
            removed.append(name)
        except OSError:
            continue  # locked: its writer still runs (or it went meanwhile)
        finally:
            os.close(fd)
    return removed


def write_verified(directory: str, verified: dict) -> None:
    partial: str | None
    fd, partial = temporary(directory, VERIFIED)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(verified, handle, sort_keys=True)
            handle.flush()
            os.replace(partial, os.path.join(directory, VERIFIED))
            partial = None
    finally:
        if partial:
            _remove(partial)


def check_wheels(directory: str, wheels: list, known: dict | None = None) -> tuple[list, list, dict]:
    """(missing, corrupt, verified) for `wheels` ([{file, sha256}]) in `directory`. A file is
    hashed again only when its size or mtime changed since its hash was last checked (kept in
    VERIFIED), so an unchanged wheelhouse costs a stat per file, and any write to a wheel (by
    hand, a disk fault, a half copy) makes it checked in full. `missing` holds every file to
    fetch (absent or corrupt); `corrupt` one sentence per corrupt file. `known` is the record,
    when the caller has read it already."""
    known = read_verified(directory) if known is None else known
    missing, corrupt, verified = [], [], {}
    for wheel in wheels:
        name, want = wheel["file"], wheel["sha256"]
        try:
            stat = os.stat(os.path.join(directory, name))
        except OSError:
            missing.append(name)
            continue
        seen = [stat.st_size, stat.st_mtime_ns]
        entry = known.get(name)
        digest = entry[2] if isinstance(entry, list) and entry[:2] == seen and len(entry) == 3 else None
        if digest is None:
            digest = sha256_file(os.path.join(directory, name))
        if digest != want:
            missing.append(name)
            corrupt.append(f"{name}: sha256 {digest[:16]}... is not the lock's {want[:16]}... "
                           f"(altered or damaged on this node)")
            continue
        verified[name] = [*seen, digest]
    return missing, corrupt, verified


def spread_tree(seed: str, receivers: list, fanout: int = 2) -> dict:
    """{node: parent} for every receiver, in a tree of `fanout` children per node rooted at the
    seed, filled level by level in the order given: the depth is log(fanout) of the count."""
    if fanout < 1:
        raise ValueError("fanout must be 1 or more")
    order = [seed] + [node for node in receivers if node != seed]
    return {order[i]: order[(i - 1) // fanout] for i in range(1, len(order))}


# ---------------------------------------------------------------------------------------------
# Fetching
# ---------------------------------------------------------------------------------------------

class NotYet(Exception):
    """The source will have the file, but not yet (it is still fetching it itself)."""


def _download(url: str, dest: str, want: str, expected: int, timeout: float) -> int:
    """Stream `url` into a temporary file of this download's own, hashing each block as it is
    written, then, when the hash is the lock's, fsync and rename that same file into place: the
    bytes that take the wheel's name are exactly the bytes hashed. No more than `expected` bytes
    (the lock's size) are written: a source that announces or sends more is cut off there, so it
    cannot fill the disk before the hash is known. Returns the bytes read; raises NotYet on 503,
    SpreadError on a size or hash that differs, OSError otherwise."""
    try:
        response = open_url(url, timeout=timeout, validate_certs=False)  # plain http on the cluster network
    except urllib.error.HTTPError as err:
        if err.code == 503:
            raise NotYet(url) from err
        raise OSError(f"HTTP {err.code} from {url}") from err
    except urllib.error.URLError as err:  # the socket's own error (refused, unreachable), unwrapped
        raise err.reason if isinstance(err.reason, OSError) else OSError(str(err.reason)) from err
    name = os.path.basename(dest)
    digest, size = hashlib.sha256(), 0
    with response:
        announced = response.headers.get("Content-Length", "")
        if announced.isdigit() and int(announced) > expected:
            raise SpreadError(f"{url} announces {announced} bytes for {name}, more than the lock's {expected}: "
                              f"nothing of it written")
        partial: str | None
        fd, partial = temporary(os.path.dirname(dest), name)
        try:
            with os.fdopen(fd, "wb") as handle:
                # One byte past the lock's size at most: enough to tell a source that sends more.
                for block in iter(lambda: response.read(min(BLOCK, expected + 1 - size)), b""):
                    size += len(block)
                    if size > expected:
                        raise SpreadError(f"{url} sent {name} longer than the lock's {expected} bytes "
                                          f"(byte {size} arrived): stopped there, nothing of it kept")
                    digest.update(block)
                    handle.write(block)
                if digest.hexdigest() != want:
                    raise SpreadError(f"{url} sent {name} with sha256 "
                                      f"{digest.hexdigest()[:16]}..., not the lock's {want[:16]}...")
                handle.flush()
                os.fsync(fd)
                # Renamed while still open, so locked: no clean-up can take it for a dead writer's.
                os.replace(partial, dest)
                partial = None
        finally:
            if partial:
                _remove(partial)  # its own only: another download's file has a name of its own
    return size


def _fetch_from(source: str, wheel: dict, directory: str, deadline: float, wait: float):
    """(bytes, None) when `source` gave the wheel, (None, reason) when it did not."""
    url = source.rstrip("/") + "/" + urllib.parse.quote(wheel["file"])
    refused = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, f"{source}: not had within the timeout"
        try:
            return _download(url, os.path.join(directory, wheel["file"]), wheel["sha256"], wheel["size"],
                             min(left, 60)), None
        except NotYet:
            pass  # its node is still fetching it
        except ConnectionRefusedError:
            # Its server may not listen yet (the servers start a moment before the fetches).
            refused += 1
            if refused > 10:
                return None, f"{source}: connection refused"
        except (OSError, SpreadError) as err:
            return None, f"{source}: {err}"
        time.sleep(min(wait, max(0.0, deadline - time.monotonic())))


def fetch_wheels(directory: str, wheels: list, sources: list, timeout: float,
                 wait: float = 1.0) -> dict:
    """Fetch `wheels` ([{file, sha256, size}]) into `directory`, each from the first of `sources`
    (base URLs) that gives it: a source still fetching it itself is asked again until `timeout`;
    one that cannot be reached, does not have it, or sends other bytes or more than `size` is
    passed over for the next.
    Returns {source: bytes fetched}; raises SpreadError naming the file and every source's
    reason when none gave it."""
    deadline = time.monotonic() + timeout
    got = {source: 0 for source in sources}
    for wheel in wheels:
        reasons = []
        for source in sources:
            size, reason = _fetch_from(source, wheel, directory, deadline, wait)
            if size is not None:
                got[source] += size
                break
            reasons.append(reason)
        else:
            raise SpreadError(f"{wheel['file']} could not be fetched: " + "; ".join(reasons or ["no source given"]))
    return got


# ---------------------------------------------------------------------------------------------
# Serving
# ---------------------------------------------------------------------------------------------

def _send(connection: socket.socket, data: bytes) -> None:
    """Send all of `data`, the socket's timeout bounding each wait for room to send, not the whole
    (as sendall's would): a slow client that still reads is never cut, one that stopped is."""
    view = memoryview(data)
    while view:
        view = view[connection.send(view):]


def _handler(directory: str, files: set, served: dict, idle_timeout: float):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"
        # Set on each connection: one that sends no request, or reads nothing, for this long is
        # closed, and its thread ends, instead of holding a thread until the server ends.
        timeout = idle_timeout

        def do_GET(self):  # noqa: N802 (http.server's name)
            name = urllib.parse.unquote(self.path.lstrip("/"))
            path = os.path.join(directory, name)
            if name not in files:
                self.send_error(404, "not a wheel of this wheelhouse")
                return
            if not os.path.exists(path):
                # 503: this node still fetches it, ask again; 404: it will not have it.
                still = os.path.exists(os.path.join(directory, FETCHING))
                self.send_error(503 if still else 404, "not here yet" if still else "not here")
                return
            size = os.path.getsize(path)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            try:
                with open(path, "rb") as handle:
                    for block in iter(lambda: handle.read(BLOCK), b""):
                        _send(self.connection, block)
            except OSError:
                # The client stopped reading (timeout) or went: it asks again or asks its next
                # source, and checks whatever it got against the lock anyway.
                self.close_connection = True
                return
            served[self.client_address[0]] = served.get(self.client_address[0], 0) + size

        def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
            pass  # the module's result says what was served

    return Handler


def serve(directory: str, files: list, address: str, port: int, timeout: float,
          pending: bool, ready=None, idle_timeout: float = IDLE_TIMEOUT) -> dict:
    """Serve `files` of `directory` on address:port (that address only) until SERVING is removed
    or `timeout` seconds pass; with `pending`, FETCHING is made first, so that children asking
    before this node's own fetch starts are told to ask again. A connection idle for
    `idle_timeout` seconds (no request, or no byte taken) is closed. Returns {client address:
    bytes}. Raises OSError when the address or port cannot be had."""
    served: dict[str, int] = {}
    server = ThreadingHTTPServer((address, port), _handler(directory, set(files), served, idle_timeout))
    server.daemon_threads = True
    marker = os.path.join(directory, SERVING)
    try:
        with open(marker, "w") as handle:
            handle.write(json.dumps({"pid": os.getpid(), "address": address, "port": port}))
        if pending:
            open(os.path.join(directory, FETCHING), "w").close()
        if ready:
            ready()
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        while os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        server.shutdown()
    finally:
        server.server_close()
        for name in (SERVING, FETCHING) if pending else (SERVING,):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass
    return served


def listening(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False
