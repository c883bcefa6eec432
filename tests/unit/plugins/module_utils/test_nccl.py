"""NCCL's version code, as ncclGetVersion gives it, read as MAJOR.MINOR.PATCH."""

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._nccl import read_version, version_text


@pytest.mark.parametrize("code, text", [(22907, "2.29.7"), (21803, "2.18.3"), (20900, "2.9.0"),
                                        (2804, "2.8.4"), (2708, "2.7.8")])
def test_version_code(code, text):
    assert version_text(code) == text


def test_the_wheel_of_this_environment_or_a_clear_error():
    """Where the nvidia-nccl wheel is installed (the nodes' environments; not the controller's venv)
    the real library answers; elsewhere the import names what is missing."""
    try:
        import nvidia.nccl  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        with pytest.raises(ImportError):
            read_version("wheel")
    else:
        version, path = read_version("wheel")
        assert version.startswith("2.") and path.endswith("libnccl.so.2")
