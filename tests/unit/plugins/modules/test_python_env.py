"""Pure logic of the Python environment: wheel targets, locks and drift (cross-node differences: test_host_differences.py)."""

import hashlib
import importlib.metadata
import io
import sys
import zipfile

import pytest

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import packages as _packages
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node import probe as _node_probe
from ansible_collections.torchfleet.cluster.plugins.modules import python_env_sync as sync
from ansible_collections.torchfleet.cluster.plugins.modules import wheelhouse


def test_platform_tags_cover_every_glibc_up_to_the_nodes_own():
    tags = wheelhouse.platform_tags("x86_64", "2.36")
    assert tags[0] == "manylinux_2_36_x86_64"
    assert "manylinux_2_28_x86_64" in tags and "manylinux_2_17_x86_64" in tags
    assert "manylinux_2_37_x86_64" not in tags
    assert "manylinux2014_x86_64" in tags and tags[-1] == "linux_x86_64"


def test_platform_tags_leave_out_legacy_names_newer_than_the_glibc():
    tags = wheelhouse.platform_tags("aarch64", "2.12")
    assert "manylinux2014_aarch64" not in tags
    assert "manylinux2010_aarch64" in tags


def test_no_glibc_means_pure_python_wheels_only():
    assert wheelhouse.platform_tags("x86_64", "") == []


@pytest.mark.parametrize("versions, oldest", [
    (["2.36", "2.35", "2.39"], "2.35"),
    (["2.9", "2.36"], "2.9"),  # compared as numbers, not as text
    (["2.36", ""], ""),
    ([], ""),
])
def test_the_oldest_glibc_decides(versions, oldest):
    assert wheelhouse.oldest_glibc(versions) == oldest


def params(**overrides):
    base = dict(packages=["torch==2.13.0", "numpy"], python_version="3.11", machine="x86_64", pip_args=[])
    base.update(overrides)
    return base


def test_spec_key_ignores_order_and_follows_every_input():
    key = wheelhouse.spec_key(params(), "2.36")
    assert key == wheelhouse.spec_key(params(packages=["numpy", "torch==2.13.0"]), "2.36")
    assert key != wheelhouse.spec_key(params(packages=["numpy", "torch==2.12.0"]), "2.36")
    assert key != wheelhouse.spec_key(params(python_version="3.12"), "2.36")
    assert key != wheelhouse.spec_key(params(), "2.35")
    assert key != wheelhouse.spec_key(params(pip_args=["--index-url", "http://mirror"]), "2.36")


def test_requirement_pins_read_exact_pins_only():
    pins = wheelhouse.requirement_pins([
        "nvidia-nccl-cu13==2.29.7; platform_system == \"Linux\"", "filelock", "sympy>=1.13.3",
        "Typing_Extensions == 4.16.0"])
    assert pins == {"nvidia-nccl-cu13": "2.29.7", "typing-extensions": "4.16.0"}


def fake_torch_wheel(tmp_path, requires):
    name = "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        metadata = "Name: torch\nVersion: 2.13.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
        wheel.writestr("torch-2.13.0.dist-info/METADATA", metadata)
    (tmp_path / name).write_bytes(buffer.getvalue())
    return name


def test_nccl_of_a_cuda_torch_must_match_the_spec(tmp_path):
    name = fake_torch_wheel(tmp_path, ["filelock", 'nvidia-nccl-cu13==2.29.7; platform_system == "Linux"'])
    pins = wheelhouse.torch_nccl_pins(str(tmp_path), [name])
    assert pins == {"nvidia-nccl-cu13": "2.29.7"}
    message = wheelhouse.nccl_conflict(["torch==2.13.0", "nvidia-nccl-cu12==2.29.7"], pins)
    assert "nvidia-nccl-cu12==2.29.7" in message and "nvidia-nccl-cu13==2.29.7" in message
    assert "nccl_package" in message and "nccl_version" in message
    assert wheelhouse.nccl_conflict(["torch==2.13.0", "nvidia-nccl-cu13==2.29.7"], pins) is None


def test_a_cpu_torch_takes_any_nccl(tmp_path):
    name = fake_torch_wheel(tmp_path, ["filelock", "sympy>=1.13.3"])
    assert wheelhouse.torch_nccl_pins(str(tmp_path), [name]) == {}
    assert wheelhouse.nccl_conflict(["torch==2.13.0", "nvidia-nccl-cu12==2.29.7"], {}) is None


def test_wheel_file_names_give_canonical_names_and_versions():
    assert wheelhouse.wheel_name_version("typing_extensions-4.16.0-py3-none-any.whl") == ("typing-extensions", "4.16.0")
    assert wheelhouse.wheel_name_version("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl") == ("torch", "2.13.0+cpu")


def test_parse_lock_reads_pins_and_hashes_and_rejects_a_line_without_either():
    a, b = "a" * 64, "0123456789abcdef" * 4
    assert sync.parse_lock([f"Numpy==2.4.6 --hash=sha256:{a}", f"torch==2.13.0+cpu --hash=sha256:{b}"]) == (
        {"numpy": "2.4.6", "torch": "2.13.0+cpu"}, {"numpy": a, "torch": b})
    with pytest.raises(ValueError, match="'numpy' is not name==version"):
        sync.parse_lock(["numpy"])
    # Every node installs with the hashes required: a lock without them is refused, not trusted.
    with pytest.raises(ValueError, match="has no --hash=sha256:HEX"):
        sync.parse_lock(["numpy==2.4.6"])


def test_wheelhouse_lock_pins_each_wheel_by_sha256_and_an_old_lock_is_noticed(tmp_path):
    (tmp_path / "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"numpy bytes")
    (tmp_path / "Typing_Extensions-4.16.0-py3-none-any.whl").write_bytes(b"typing bytes")
    wheels, lock = wheelhouse.describe(str(tmp_path), [p.name for p in tmp_path.iterdir()])
    numpy = hashlib.sha256(b"numpy bytes").hexdigest()
    assert lock == [f"numpy==2.4.6 --hash=sha256:{numpy}",
                    f"typing-extensions==4.16.0 --hash=sha256:{hashlib.sha256(b'typing bytes').hexdigest()}"]
    assert wheels[1] == {"file": "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl", "sha256": numpy, "size": 11}
    assert sync.parse_lock(lock)[0] == {"numpy": "2.4.6", "typing-extensions": "4.16.0"}
    wheelhouse.write_lock(str(tmp_path), lock)
    assert wheelhouse.read_lock(str(tmp_path)) == (wheels, lock)
    # A lock an earlier torchfleet wrote, without hashes: read_lock says so, the module hashes.
    (tmp_path / wheelhouse.LOCK).write_text("numpy==2.4.6\ntyping-extensions==4.16.0\n")
    assert wheelhouse.read_lock(str(tmp_path)) is None


def test_a_node_environment_is_read_from_its_metadata_and_its_drift_named(tmp_path):
    site = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    for name, version in (("numpy", "2.4.6"), ("Typing_Extensions", "4.16.0"), ("requests", "2.32.0")):
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    python = str(tmp_path / "env" / "bin" / "python")
    wanted = {"numpy": "2.4.6", "typing-extensions": "4.16.0", "sympy": "1.14.0"}
    assert _packages.environment_drift(python, wanted) == [
        "sympy is missing (spec: 1.14.0)", "requests 2.32.0 is installed but not in the spec"]
    assert _node_probe.probe({"packages": {"python": python, "expect": {**wanted, "requests": "2.32.0"}}}) == {
        "drift": ["sympy is missing (spec: 1.14.0)"]}
    assert _packages.environment_drift(str(tmp_path / "none" / "bin" / "python"), wanted) == [
        f"{tmp_path / 'none'} has no lib/python3*/site-packages"]


def test_installed_distributions_read_as_importlib_metadata_reads_them(tmp_path):
    """The launch's check reads METADATA and PKG-INFO headers itself (importlib.metadata's import
    was most of each node's check): the same names and versions, egg-info files and directories
    (conda and Debian install those) included, and this test run's own environment alike."""
    site = tmp_path / "site-packages"
    (site / "Typing_Extensions-4.16.0.dist-info").mkdir(parents=True)
    (site / "Typing_Extensions-4.16.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: Typing_Extensions\nVersion: 4.16.0\n\nName: not-a-header\n")
    (site / "six-1.16.0.egg-info").write_text("Metadata-Version: 1.1\nName: six\nVersion: 1.16.0\n")
    (site / "pyyaml.egg-info").mkdir()
    (site / "pyyaml.egg-info" / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: PyYAML\nVersion: 6.0.1\n")
    (site / "broken-1.0.dist-info").mkdir()  # no METADATA: not a distribution, for either reader
    found = _packages.installed_distributions([str(site)])
    assert found == {"typing-extensions": "4.16.0", "six": "1.16.0", "pyyaml": "6.0.1"}
    for paths in ([str(site)], [p for p in sys.path if p.endswith("-packages")]):
        expected = {_packages.canonical(dist.metadata["Name"]): dist.version
                    for dist in importlib.metadata.distributions(path=paths) if dist.metadata["Name"]}
        assert _packages.installed_distributions(paths) == expected
        assert expected


def test_differences_name_missing_changed_and_extra_packages():
    installed = {"filelock": "3.12.0", "numpy": "2.4.6", "requests": "2.32.0", "pip": "23.0.1"}
    wanted = {"filelock": "4.2.11", "numpy": "2.4.6", "mpmath": "1.3.0"}
    sentences, install, remove = sync.differences(installed, wanted, keep={"pip"})
    assert sentences == ["filelock is 3.12.0, the spec says 4.2.11", "mpmath is missing (spec: 1.3.0)",
                         "requests 2.32.0 is installed but not in the spec"]
    assert install == ["filelock==4.2.11", "mpmath==1.3.0"]
    assert remove == ["requests"]


def test_no_differences_when_the_environment_matches():
    assert sync.differences({"numpy": "2.4.6", "pip": "24"}, {"numpy": "2.4.6"}, keep={"pip"}) == ([], [], [])


def test_fingerprint_changes_with_any_package_or_the_python():
    base = sync.fingerprint("3.11.2", {"numpy": "2.4.6", "torch": "2.13.0+cpu"})
    assert base == sync.fingerprint("3.11.2", {"torch": "2.13.0+cpu", "numpy": "2.4.6"})
    assert base != sync.fingerprint("3.11.2", {"numpy": "2.4.5", "torch": "2.13.0+cpu"})
    assert base != sync.fingerprint("3.11.9", {"numpy": "2.4.6", "torch": "2.13.0+cpu"})
