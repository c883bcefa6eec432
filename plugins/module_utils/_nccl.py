# Copyright: torchfleet contributors
"""The version of the NCCL library PyTorch would load, read through ncclGetVersion (ctypes): from
the nvidia-nccl wheel of the running interpreter's environment, or the system's libnccl.so.2."""

from __future__ import annotations

import ctypes
import os


def version_text(code: int) -> str:
    """ncclGetVersion's code as MAJOR.MINOR.PATCH: MAJOR*10000 + MINOR*100 + PATCH since NCCL 2.9,
    MAJOR*1000 + MINOR*100 + PATCH before."""
    major, rest = divmod(code, 10000) if code >= 20900 else divmod(code, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def library_path(source: str) -> str:
    if source == "wheel":
        # The wheel's namespace package, in the environment of the interpreter that runs this.
        import nvidia.nccl  # pylint: disable=import-outside-toplevel,import-error
        return os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2")
    return "libnccl.so.2"


def read_version(source: str) -> tuple[str, str]:
    """(version, library path); ImportError without the wheel, OSError when the library does not
    load, RuntimeError when ncclGetVersion fails."""
    path = library_path(source)
    code = ctypes.c_int()
    status = ctypes.CDLL(path).ncclGetVersion(ctypes.byref(code))
    if status != 0:
        raise RuntimeError(f"ncclGetVersion in {path} returned error {status}")
    return version_text(code.value), path
