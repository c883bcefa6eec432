"""The wheelhouse module run as Ansible runs it (a process, its arguments as JSON), against a
local index of wheels made here: no network."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
MODULE = REPO / "plugins" / "modules" / "wheelhouse.py"


def make_wheel(directory: Path, name: str, version: str) -> Path:
    path = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name}/__init__.py", "# " + "x" * 100_000 + "\n")
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    return path


def start(tmp_path: Path, index: Path, root: Path, tag: str) -> subprocess.Popen:
    args = tmp_path / f"args-{tag}.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        "packages": [f"tfwheel{i}==1.0" for i in range(6)], "root": str(root),
        "python_version": f"{sys.version_info.major}.{sys.version_info.minor}", "machine": "x86_64",
        "pip_args": ["--no-index", "--find-links", str(index)],
    }}))
    env = dict(os.environ, PYTHONPATH=str(REPO / ".collections"))
    return subprocess.Popen([sys.executable, str(MODULE), str(args)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_controllers_asking_for_one_spec_at_once_both_get_it_whole(tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    for i in range(6):
        make_wheel(index, f"tfwheel{i}", "1.0")
    root = tmp_path / "wheelhouse"
    procs = [start(tmp_path, index, root, tag) for tag in ("a", "b")]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, out + err
        results.append(json.loads(out))
    # One downloaded, the other waited and found the spec complete; both name the same wheels.
    assert sorted(r["changed"] for r in results) == [False, True], results
    assert results[0]["path"] == results[1]["path"] and results[0]["lock"] == results[1]["lock"]
    assert len(results[0]["lock"]) == 6
    spec = Path(results[0]["path"])
    assert sorted(p.name for p in spec.glob("*.whl")) == sorted(p.name for p in index.glob("*.whl"))
    assert not list(root.glob("*.partial"))
