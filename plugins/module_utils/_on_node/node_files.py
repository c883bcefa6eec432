"""The files a run needs at the same path on every node: their digests, and each written whole or
not at all."""

from __future__ import annotations

import base64
import hashlib
import os
import tempfile


def file_sha1(path: str) -> str | None:
    """SHA-1 of a file's content, read in blocks; None when it cannot be read (missing, say)."""
    digest = hashlib.sha1()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def files_to_place(file_contents: dict) -> tuple[dict, dict]:
    """({absolute path: base64 content}, {absolute path: sha1 of the bytes}) of the files a run
    needs on every node, from {path or ~/path: base64 content}; ValueError names a bad entry."""
    files, digests = {}, {}
    for path, content in file_contents.items():
        where = os.path.expanduser(path)
        if not os.path.isabs(where):
            raise ValueError(f"{path} is not an absolute path (or ~/...); the nodes would each read "
                             f"it from another directory")
        try:
            digests[where] = hashlib.sha1(base64.b64decode(content, validate=True)).hexdigest()
        except (TypeError, ValueError):
            raise ValueError(f"the content given for {path} is not base64; encode it with the "
                             f"torchfleet.cluster.file_b64 filter") from None
        files[where] = content
    return files, digests


def write_file(path: str, content: bytes) -> None:
    """Whole or not at all: a rank never reads half a script. Directories 0750, files 0640, as
    the training account's own."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o750, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=directory, prefix=".torchfleet-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(content)
        os.chmod(partial, 0o640)
        os.replace(partial, path)
    except BaseException:
        os.unlink(partial)
        raise
