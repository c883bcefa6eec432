"""The `torchfleet.cluster.hostfile` inventory plugin through the real `ansible-inventory`."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The ansible-inventory of the Python running the tests (the venv's), else the one on PATH.
ANSIBLE_INVENTORY = (str(Path(sys.executable).with_name("ansible-inventory"))
                     if Path(sys.executable).with_name("ansible-inventory").exists()
                     else shutil.which("ansible-inventory") or "ansible-inventory")


def plain(value):
    """JSON from ansible-inventory with the `{"__ansible_unsafe": x}` wrappers taken off."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def inventory(tmp_path, config, files=None, name="cluster.hostfile.yml", args=("--list",),
              fail_on_unparsed=True, env=None):
    for file_name, text in (files or {}).items():
        (tmp_path / file_name).write_text(text)
    source = tmp_path / name
    source.write_text(config)
    # The tests' own Slurm job, if any, stays out unless a test sets the variable.
    environment = {key: value for key, value in os.environ.items() if key != "SLURM_JOB_NODELIST"}
    environment.update(ANSIBLE_NOCOLOR="1", **(env or {}))
    if fail_on_unparsed:
        environment["ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED"] = "true"
    result = subprocess.run([ANSIBLE_INVENTORY, *args, "-i", str(source)], cwd=REPO,
                            capture_output=True, text=True, timeout=120, env=environment, check=False)
    return result


def listing(tmp_path, config, files=None, **kwargs):
    result = inventory(tmp_path, config, files, **kwargs)
    assert result.returncode == 0, result.stdout + result.stderr
    return plain(json.loads(result.stdout))


def failure(tmp_path, config, files=None, **kwargs):
    result = inventory(tmp_path, config, files, **kwargs)
    assert result.returncode != 0, result.stdout
    output = " ".join(result.stderr.split())
    assert "Traceback" not in output
    return output


MPI_HOSTS = """# my-hosts
gpu01 slots=8    # the head
gpu02 slots=8 max_slots=16
10.10.10.13:4

10.10.10.14
"""


def test_mpi_hostfile_gives_group_order_slots_and_head(tmp_path):
    data = listing(tmp_path, "plugin: torchfleet.cluster.hostfile\npath: my-hosts\n",
                   {"my-hosts": MPI_HOSTS})
    assert data["cluster"]["hosts"] == ["gpu01", "gpu02", "10.10.10.13", "10.10.10.14"]
    hostvars = data["_meta"]["hostvars"]
    assert hostvars["gpu01"] == {"ansible_host": "gpu01", "nproc_per_node": 8,
                                 "torchfleet_head": "gpu01"}
    assert hostvars["10.10.10.13"] == {"ansible_host": "10.10.10.13", "nproc_per_node": 4,
                                       "torchfleet_head": "gpu01"}
    # No count in the file: no nproc_per_node, so the playbooks' `auto` applies.
    assert hostvars["10.10.10.14"] == {"ansible_host": "10.10.10.14", "torchfleet_head": "gpu01"}


def test_head_is_a_group_variable(tmp_path):
    data = listing(tmp_path, "plugin: torchfleet.cluster.hostfile\npath: my-hosts\n",
                   {"my-hosts": MPI_HOSTS}, args=("--list", "--export"))
    assert data["cluster"]["vars"] == {"torchfleet_head": "gpu01"}
    assert "torchfleet_head" not in data["_meta"]["hostvars"]["gpu02"]


def test_absolute_path_and_torchfleet_hostfile_name(tmp_path):
    hosts = tmp_path / "elsewhere" / "hosts"
    hosts.parent.mkdir()
    hosts.write_text("b slots=2\na slots=2\n")
    data = listing(tmp_path, f"plugin: torchfleet.cluster.hostfile\npath: {hosts}\n",
                   name="torchfleet_hostfile.yaml")
    assert data["cluster"]["hosts"] == ["b", "a"]


def test_pbs_nodefile_is_detected_and_counted(tmp_path):
    nodefile = "r1n0\nr1n0\nr1n1\nr1n0\nr1n1\nr1n2\n"
    data = listing(tmp_path, "plugin: torchfleet.cluster.hostfile\npath: nodefile\n",
                   {"nodefile": nodefile})
    assert data["cluster"]["hosts"] == ["r1n0", "r1n1", "r1n2"]
    counts = {host: v.get("nproc_per_node") for host, v in data["_meta"]["hostvars"].items()}
    assert counts == {"r1n0": 3, "r1n1": 2, "r1n2": 1}


def test_slurm_nodelist_option_with_slots_and_group(tmp_path):
    config = ("plugin: torchfleet.cluster.hostfile\nnodelist: gpu[08-10],login-a[1-2]\n"
              "slots_per_node: 4\ngroup: gpus\n")
    data = listing(tmp_path, config)
    assert data["gpus"]["hosts"] == ["gpu08", "gpu09", "gpu10", "login-a1", "login-a2"]
    assert "cluster" not in data
    assert data["_meta"]["hostvars"]["login-a2"] == {"ansible_host": "login-a2",
                                                     "nproc_per_node": 4,
                                                     "torchfleet_head": "gpu08"}


def test_slurm_nodelist_file_without_slots(tmp_path):
    data = listing(tmp_path, "plugin: torchfleet.cluster.hostfile\npath: nodelist\n",
                   {"nodelist": "# $SLURM_JOB_NODELIST\nrack[1-2]-n[01-02]\n"})
    assert data["cluster"]["hosts"] == ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]
    assert "nproc_per_node" not in data["_meta"]["hostvars"]["rack1-n01"]


def test_slurm_nodelist_from_the_job_environment(tmp_path):
    data = listing(tmp_path, "plugin: torchfleet.cluster.hostfile\nformat: slurm\nslots_per_node: 2\n",
                   env={"SLURM_JOB_NODELIST": "node[1-3]"})
    assert data["cluster"]["hosts"] == ["node1", "node2", "node3"]


def test_constructed_options_compose_groups_and_keyed_groups(tmp_path):
    config = """plugin: torchfleet.cluster.hostfile
path: my-hosts
strict: true
compose:
  is_head: inventory_hostname == torchfleet_head
groups:
  big: (nproc_per_node | default(0)) >= 8
keyed_groups:
  - key: ansible_host.split('.')[0]
    prefix: site
"""
    data = listing(tmp_path, config, {"my-hosts": MPI_HOSTS})
    assert data["big"]["hosts"] == ["gpu01", "gpu02"]
    assert data["site_10"]["hosts"] == ["10.10.10.13", "10.10.10.14"]
    assert data["_meta"]["hostvars"]["gpu01"]["is_head"] is True
    assert data["_meta"]["hostvars"]["gpu02"]["is_head"] is False


def test_strict_compose_error_fails(tmp_path):
    config = "plugin: torchfleet.cluster.hostfile\npath: h\nstrict: true\ncompose:\n  x: no_such_var.y\n"
    output = failure(tmp_path, config, {"h": "a\n"})
    assert "Could not set x for host a" in output


BAD_FILES = {
    "duplicate host": ("gpu01 slots=4\ngpu02 slots=4\ngpu01 slots=4\n", "mpi",
                       "line 3: host 'gpu01' is listed again (first on line 1)"),
    "slots=0": ("gpu01 slots=8\n# next\ngpu02 slots=0\n", "auto",
                "line 3: bad slot count in 'slots=0'"),
    "host: without count": ("gpu01:\n", "auto", "line 1: no slot count in 'gpu01:'"),
    "unknown keyword": ("gpu01 gpus=8\n", "auto", "line 1: unknown keyword 'gpus'"),
    "only comments": ("# nothing yet\n\n", "auto",
                      "line 2: end of file and no host listed: all 2 lines are blank or comments"),
    "bad host name": ("gpu01\ngpu#02\ngpu/03\n", "auto", "line 3: 'gpu/03' is not a valid host name"),
    "PBS line of two words": ("gpu01\ngpu01 gpu02\n", "pbs", "line 2: 'gpu01 gpu02' has 2 words"),
    "Slurm range backwards": ("gpu[5-2]\n", "slurm", "line 1: range '5-2' in 'gpu[5-2]' runs backwards"),
    "Slurm unclosed": ("gpu[01-\n", "auto", "line 1: unclosed '[' in Slurm nodelist 'gpu[01-'"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_malformed_file_fails_naming_file_and_line(case, tmp_path):
    text, fmt, message = BAD_FILES[case]
    config = f"plugin: torchfleet.cluster.hostfile\npath: hosts.txt\nformat: {fmt}\n"
    output = failure(tmp_path, config, {"hosts.txt": text})
    assert f"{tmp_path / 'hosts.txt'}, {message}" in output
    assert f"(inventory source {tmp_path / 'cluster.hostfile.yml'})" in output


def test_malformed_file_is_a_warning_by_default_and_no_host_is_added(tmp_path):
    result = inventory(tmp_path, "plugin: torchfleet.cluster.hostfile\npath: h\n",
                       {"h": "a slots=x\n"}, fail_on_unparsed=False)
    assert result.returncode == 0
    assert "line 1: bad slot count in 'slots=x'" in " ".join(result.stderr.split())
    assert "cluster" not in json.loads(result.stdout)


def test_malformed_nodelist_option(tmp_path):
    output = failure(tmp_path, "plugin: torchfleet.cluster.hostfile\nnodelist: a,,b\n")
    assert "cluster.hostfile.yml (option nodelist), line 1: empty item in Slurm nodelist 'a,,b'" in output


CONFIG_ERRORS = {
    "neither path nor nodelist": ("format: auto\n", "say where the hosts are: path: FILE"),
    "both path and nodelist": ("path: h\nnodelist: a\n", "give either path (a file) or nodelist"),
    "nodelist with format mpi": ("nodelist: a\nformat: mpi\n", "but format is mpi"),
    "slurm outside a job": ("format: slurm\n", "run inside a Slurm job"),
    "bad group": ("path: h\ngroup: gpu-nodes\n", "group 'gpu-nodes' is not usable"),
    "group all": ("path: h\ngroup: all\n", "group 'all' is not usable"),
    "slots_per_node 0": ("path: h\nslots_per_node: 0\n", "option slots_per_node: 0 is not a slot count"),
    "unknown format": ("path: h\nformat: lsf\n", "Invalid value 'lsf' for config 'format'"),
    "missing file": ("path: nowhere\n", "nowhere: cannot read it: No such file or directory"),
}


@pytest.mark.parametrize("case", sorted(CONFIG_ERRORS))
def test_configuration_errors(case, tmp_path):
    options, message = CONFIG_ERRORS[case]
    output = failure(tmp_path, "plugin: torchfleet.cluster.hostfile\n" + options, {"h": "a\n"})
    assert message in output


def test_config_file_needs_a_hostfile_name(tmp_path):
    output = failure(tmp_path, "plugin: torchfleet.cluster.hostfile\npath: h\n", {"h": "a\n"},
                     name="hosts.yml")
    assert "could not be verified by inventory plugin 'torchfleet.cluster.hostfile'" in output


def test_ansible_doc_documents_the_plugin():
    ansible_doc = Path(ANSIBLE_INVENTORY).with_name("ansible-doc")
    result = subprocess.run([str(ansible_doc) if ansible_doc.exists() else "ansible-doc", "-t",
                             "inventory", "--json", "torchfleet.cluster.hostfile"], cwd=REPO,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)["torchfleet.cluster.hostfile"]["doc"]
    assert {"plugin", "path", "nodelist", "format", "group", "slots_per_node", "compose", "groups",
            "keyed_groups", "strict"} <= set(doc["options"])
