"""The wheelhouse inside the cluster: verified by sha256, spread from node to node over HTTP.

The controller sends the wheels once, to one node (the seed). The other nodes fetch them from a
parent in a tree rooted at the seed (spread_tree), each file checked against the lock's sha256,
so a node that holds the wheels serves them to its children while its own parent still serves
it: the controller's traffic does not grow with the node count, and the depth of the tree (the
time) grows with its logarithm.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ansible.module_utils.urls import open_url

# In the node's wheelhouse directory, beside the wheels.
VERIFIED = ".torchfleet-verified.json"  # {file: [size, mtime_ns, sha256]}: hashes already checked
SERVING = ".torchfleet-serving"  # exists while a server runs here; removing it stops the server
FETCHING = ".torchfleet-fetching"  # exists while this node still fetches: "ask again" to its children
PARTIAL = ".partial"
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


def write_verified(directory: str, verified: dict) -> None:
    path = os.path.join(directory, VERIFIED)
    with open(path + PARTIAL, "w") as handle:
        json.dump(verified, handle, sort_keys=True)
    os.replace(path + PARTIAL, path)


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


def _download(url: str, dest: str, want: str, timeout: float) -> int:
    """Stream `url` into dest + PARTIAL, check its sha256, then rename it into place. Returns the
    bytes read; raises NotYet on 503, SpreadError on a hash that differs, OSError otherwise."""
    try:
        response = open_url(url, timeout=timeout, validate_certs=False)  # plain http on the cluster network
    except urllib.error.HTTPError as err:
        if err.code == 503:
            raise NotYet(url) from err
        raise OSError(f"HTTP {err.code} from {url}") from err
    except urllib.error.URLError as err:  # the socket's own error (refused, unreachable), unwrapped
        raise err.reason if isinstance(err.reason, OSError) else OSError(str(err.reason)) from err
    digest, size = hashlib.sha256(), 0
    with response, open(dest + PARTIAL, "wb") as handle:
        for block in iter(lambda: response.read(BLOCK), b""):
            digest.update(block)
            handle.write(block)
            size += len(block)
    if digest.hexdigest() != want:
        os.unlink(dest + PARTIAL)
        raise SpreadError(f"{url} sent {os.path.basename(dest)} with sha256 {digest.hexdigest()[:16]}..., "
                          f"not the lock's {want[:16]}...")
    os.chmod(dest + PARTIAL, 0o644)
    os.replace(dest + PARTIAL, dest)
    return size


def _fetch_from(source: str, wheel: dict, directory: str, deadline: float, wait: float):
    """(bytes, None) when `source` gave the wheel, (None, reason) when it did not."""
    url = source.rstrip("/") + "/" + urllib.request.quote(wheel["file"])
    refused = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, f"{source}: not had within the timeout"
        try:
            return _download(url, os.path.join(directory, wheel["file"]), wheel["sha256"], min(left, 60)), None
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
    """Fetch `wheels` ([{file, sha256}]) into `directory`, each from the first of `sources` (base
    URLs) that gives it: a source still fetching it itself is asked again until `timeout`; one
    that cannot be reached, does not have it, or sends other bytes is passed over for the next.
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

def _handler(directory: str, files: set, served: dict):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self):  # noqa: N802 (http.server's name)
            name = urllib.request.unquote(self.path.lstrip("/"))
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
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(BLOCK), b""):
                    self.wfile.write(block)
            served[self.client_address[0]] = served.get(self.client_address[0], 0) + size

        def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
            pass  # the module's result says what was served

    return Handler


def serve(directory: str, files: list, address: str, port: int, timeout: float,
          pending: bool, ready=None) -> dict:
    """Serve `files` of `directory` on address:port (that address only) until SERVING is removed
    or `timeout` seconds pass; with `pending`, FETCHING is made first, so that children asking
    before this node's own fetch starts are told to ask again. Returns {client address: bytes}.
    Raises OSError when the address or port cannot be had."""
    server = ThreadingHTTPServer((address, port), _handler(directory, set(files), served := {}))
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
