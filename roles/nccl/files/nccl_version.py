# Print the version of the NCCL library that PyTorch would load, read through ncclGetVersion.
# Argument: "wheel" (the nvidia-nccl-* wheel of this interpreter's environment) or "system".
import ctypes
import json
import os
import sys


def library():
    if sys.argv[1] == "wheel":
        import nvidia.nccl  # the wheel's namespace package
        return os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2")
    return "libnccl.so.2"


path = library()
code = ctypes.c_int()
result = ctypes.CDLL(path).ncclGetVersion(ctypes.byref(code))
if result != 0:
    sys.exit(f"ncclGetVersion in {path} returned error {result}")
# Since NCCL 2.9 the code is MAJOR*10000 + MINOR*100 + PATCH (before: MAJOR*1000 + MINOR*100 + PATCH).
major, rest = divmod(code.value, 10000) if code.value >= 20900 else divmod(code.value, 1000)
print(json.dumps({"version": f"{major}.{rest // 100}.{rest % 100}", "library": path}))
