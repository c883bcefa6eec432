"""File checks shared by the launch module (on the nodes) and a filter (on the controller)."""

from __future__ import annotations

import hashlib


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
