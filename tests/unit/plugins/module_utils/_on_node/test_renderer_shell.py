"""The rendered launch run for real (plugins/module_utils/_on_node/renderer.py): the `/bin/sh -c` part
each rank runs, with torchrun/python replaced by a small program that reports the argv and
environment it received, so quoting is proven by running it rather than by comparing strings; and
real Open MPI on this machine, when present."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from plan_helpers import make_plan, node, shell_tail

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.launch_plan import SHELL, Node
from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.renderer import render


REPORTED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "TORCHFLEET_RUN_ID", "GLOO_SOCKET_IFNAME", "PYTHONPATH", "TORCHFLEET_STACKS_DIR")

FAKE_PROGRAM = """#!{python}
# Stands in for torchrun/python: reports what it received, then exits as told.
import json, os, signal, sys
print(json.dumps({{"argv": sys.argv[1:],
                  "env": {{k: os.environ.get(k) for k in {names!r}}}}}))
sys.stdout.flush()
if os.environ.get("FAKE_SIGNAL"):
    os.kill(os.getpid(), int(os.environ["FAKE_SIGNAL"]))
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


@pytest.fixture
def fake_program(tmp_path):
    path = tmp_path / "fake bin" / "report"  # a space in the path: it must be quoted too
    path.parent.mkdir()
    path.write_text(FAKE_PROGRAM.format(python=sys.executable, names=REPORTED_ENV))
    path.chmod(0o755)
    return str(path)


def hostile_args(marker: Path) -> tuple[str, ...]:
    # Every payload, if it ever ran, only creates the marker file.
    return (
        f"$(touch {marker}); echo rm -rf ~",
        f'"; touch {marker}; echo "',
        f"'; touch {marker}; echo '",
        f"`touch {marker}`",
        f"; touch {marker}",
        f"&& touch {marker}",
        f"| touch {marker}",
        f"$(touch {marker})",
        "${HOME}", "$HOME", "*", "~", "", " ", "a b\tc", "line1\nline2", "--lr=1e-3", "-c",
        "\\", "'", '"', "ünïcødé", "--", "$@", "$0", "$1",
    )


def run_rank_shell(argv: list[str], env: dict[str, str], cwd: Path):
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
    return subprocess.run(shell_tail(argv), env=full_env, cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)


def test_torchrun_mode_user_args_arrive_byte_for_byte(tmp_path, fake_program):
    marker = tmp_path / "pwned"
    args = hostile_args(marker)
    script = f"/opt/my runs/$(touch {marker}).py"
    rendered = render(make_plan(torchrun=fake_program, script=script, script_args=args))
    result = run_rank_shell(rendered.argv, {**rendered.env, "OMPI_COMM_WORLD_RANK": "2"}, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["argv"] == [
        "--nnodes=3", "--node-rank=2", "--nproc-per-node=2", "--rdzv-backend=static",
        "--rdzv-endpoint=172.18.0.2:29500", "--rdzv-id=run-1", script, *args]
    assert report["env"]["TORCHFLEET_RUN_ID"] == "run-1"
    assert not marker.exists()
    assert list(tmp_path.iterdir()) == [Path(fake_program).parent]  # nothing else created


def test_torchrun_extra_args_reach_torchrun_before_the_script_as_given(tmp_path, fake_program):
    marker = tmp_path / "pwned"
    extra = ("--monitor-interval=1", "--local-ranks-filter", "0", f"$(touch {marker})")
    rendered = render(make_plan(torchrun=fake_program, torchrun_extra_args=extra, script_args=("--epochs", "3")))
    result = run_rank_shell(rendered.argv, {**rendered.env, "OMPI_COMM_WORLD_RANK": "1"}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["argv"][-7:] == [*extra, "/opt/tf/train.py", "--epochs", "3"]
    assert not marker.exists()


@pytest.mark.parametrize("mode", ["torchrun", "rank"])
def test_a_supervised_runs_ranks_find_its_site_first_and_the_users_path_after(tmp_path, fake_program, mode):
    # stacks.SITE arms the dump of the stacks; the user's own PYTHONPATH still follows it.
    site, stacks = "/home/trainer/.local/share/torchfleet/site", "/r/runs/run 1/stacks"
    plan = make_plan(mode=mode, torchrun=fake_program, python=fake_program, site_dir=site, stacks_dir=stacks)
    env = {**render(plan).env, "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    for given, expected in ((None, site), ("/my lib", f"{site}:/my lib")):
        result = run_rank_shell(render(plan).argv, {**env, **({"PYTHONPATH": given} if given else {})}, tmp_path)
        assert result.returncode == 0, result.stderr
        reported = json.loads(result.stdout)["env"]
        assert (reported["PYTHONPATH"], reported["TORCHFLEET_STACKS_DIR"]) == (expected, stacks)
    person = render(make_plan(mode=mode, torchrun=fake_program, python=fake_program))  # `torchfleet render`
    assert "PYTHONPATH" not in " ".join(person.argv)


def test_one_node_standalone_runs(tmp_path, fake_program):
    rendered = render(make_plan(nodes=(node(1, slots=3),), torchrun=fake_program,
                                script_args=("x y",)))
    result = run_rank_shell(rendered.argv, rendered.env, tmp_path)  # no rank variable needed
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["argv"] == [
        "--standalone", "--nnodes=1", "--nproc-per-node=3", "/opt/tf/train.py", "x y"]


def test_rank_mode_maps_open_mpi_variables(tmp_path, fake_program):
    marker = tmp_path / "pwned"
    args = hostile_args(marker)
    nodes = (node(1, slots=4), node(2, slots=2))
    rendered = render(make_plan(mode="rank", nodes=nodes, python=fake_program, port=29611,
                                script_args=args))
    ompi = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    result = run_rank_shell(rendered.argv, {**rendered.env, **ompi}, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["argv"] == ["/opt/tf/train.py", *args]
    assert report["env"] == {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "6",
                             "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "172.18.0.2",
                             "MASTER_PORT": "29611", "TORCHFLEET_RUN_ID": "run-1",
                             "GLOO_SOCKET_IFNAME": "eth0", "PYTHONPATH": None, "TORCHFLEET_STACKS_DIR": None}
    assert not marker.exists()


@pytest.mark.parametrize("rank_env, expected_rank", [
    ({"PMI_RANK": "1"}, "1"),
    ({"PALS_RANKID": "2"}, "2"),
    ({"PMI_RANK": "0", "PALS_RANKID": "2"}, "0"),
])
def test_mpich_mode_takes_node_rank_from_pmi_or_pals(tmp_path, fake_program, rank_env,
                                                     expected_rank):
    marker = tmp_path / "pwned"
    args = hostile_args(marker)
    rendered = render(make_plan(mode="mpich", torchrun=fake_program, script_args=args))
    result = run_rank_shell(rendered.argv, {**rendered.env, **rank_env}, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["argv"][1] == f"--node-rank={expected_rank}"
    assert report["argv"][-len(args):] == list(args)
    assert not marker.exists()


@pytest.mark.parametrize("mode, program_field, expected", [
    ("torchrun", "torchrun", "OMPI_COMM_WORLD_RANK: not started by Open MPI mpirun"),
    ("rank", "python", "OMPI_COMM_WORLD_RANK: not started by Open MPI mpirun"),
    ("mpich", "torchrun", "PALS_RANKID: not started by mpiexec"),
])
def test_missing_rank_variable_fails_loudly(tmp_path, fake_program, mode, program_field, expected):
    rendered = render(make_plan(mode=mode, **{program_field: fake_program}))
    result = run_rank_shell(rendered.argv, rendered.env, tmp_path)
    assert result.returncode != 0
    assert result.stdout == ""  # the training program never started
    assert expected in result.stderr


@pytest.mark.parametrize("mode, program_field", [("torchrun", "torchrun"), ("rank", "python"),
                                                 ("mpich", "torchrun")])
def test_exit_code_passes_through(tmp_path, fake_program, mode, program_field):
    rendered = render(make_plan(mode=mode, **{program_field: fake_program}))
    env = {**rendered.env, "OMPI_COMM_WORLD_RANK": "0", "PMI_RANK": "0", "FAKE_EXIT": "7"}
    assert run_rank_shell(rendered.argv, env, tmp_path).returncode == 7


@pytest.mark.parametrize("mode, program_field", [("torchrun", "torchrun"), ("rank", "python")])
def test_death_by_signal_passes_through(tmp_path, fake_program, mode, program_field):
    """The wrapper execs, so the signal kills the process the launcher started: Python's
    subprocess reports it as -15; a shell parent (as the launcher's own wrapper would be) sees
    128+15. Never 0, never a flattened 1."""
    rendered = render(make_plan(mode=mode, **{program_field: fake_program}))
    env = {**rendered.env, "OMPI_COMM_WORLD_RANK": "0", "FAKE_SIGNAL": str(int(signal.SIGTERM))}
    direct = run_rank_shell(rendered.argv, env, tmp_path)
    assert direct.returncode == -signal.SIGTERM
    outer = subprocess.run([SHELL, "-c", '"$@"; echo "status=$?"', "outer",
                            *shell_tail(rendered.argv)],
                           env={"PATH": os.environ.get("PATH", "/bin"), **env}, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60, check=False)
    assert outer.stdout.splitlines()[-1] == f"status={128 + signal.SIGTERM}"


@pytest.mark.skipif(not Path("/sys/class/net/lo").exists(), reason="needs Linux /sys/class/net")
def test_gloo_keeps_the_first_listed_interface_the_node_has(tmp_path, fake_program):
    # With mixed names the rendered env lists them all; each node keeps one it really has.
    # `lo` stands in for "an interface this machine has" (the plan itself never allows lo).
    nodes = (node(1, interface="eth0"), node(2, interface="ens5"))
    rendered = render(make_plan(nodes=nodes, torchrun=fake_program))
    env = {**rendered.env, "OMPI_COMM_WORLD_RANK": "1",
           "GLOO_SOCKET_IFNAME": "nosuchnic0,lo,nosuchnic1"}
    result = run_rank_shell(rendered.argv, env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["env"]["GLOO_SOCKET_IFNAME"] == "lo"


# ---------------------------------------------------------------------------------------------
# Real Open MPI on this machine, when present
# ---------------------------------------------------------------------------------------------

def _local_address() -> str | None:
    # A UDP "connect" sends nothing; it only asks the kernel which source address it would use.
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("192.0.2.254", 9))
            address = sock.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


# `make test` installs Open MPI on the controller: this test runs, it is never skipped.
@pytest.mark.parametrize("mode, program_field, expected_ranks", [("rank", "python", 2),
                                                                 ("torchrun", "torchrun", 1)])
def test_real_mpirun_accepts_the_rendered_command(tmp_path, fake_program, mode, program_field,
                                                  expected_ranks):
    assert shutil.which("mpirun"), "Open MPI's mpirun is needed: apt-get install openmpi-bin"
    address = _local_address()
    assert address, "this test needs a non-loopback IPv4 address on this machine"
    marker = tmp_path / "pwned"
    args = ("a b", f"$(touch {marker})", '"; echo x')
    plan = make_plan(mode=mode, nodes=(Node("here", address, 2),), head="here",
                     network=f"{address}/32", hostfile_path=str(tmp_path / "hostfile"),
                     script_args=args, allow_run_as_root=os.geteuid() == 0,
                     **{program_field: fake_program})
    rendered = render(plan)
    Path(plan.hostfile_path).write_text(rendered.hostfile)
    env = {**os.environ, **rendered.env}
    result = subprocess.run(rendered.argv, env=env, cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    # Open MPI forwards each rank's writes as they come: one rank's newline can land after the
    # next rank's line, so read whole JSON objects rather than lines.
    decoder, reports, at = json.JSONDecoder(), [], result.stdout.find("{")
    while at != -1:
        report, end = decoder.raw_decode(result.stdout, at)
        reports.append(report)
        at = result.stdout.find("{", end)
    assert len(reports) == expected_ranks
    for report in reports:
        assert report["argv"][-3:] == list(args)
        assert report["env"]["TORCHFLEET_RUN_ID"] == "run-1"
    if mode == "rank":
        assert sorted(r["env"]["RANK"] for r in reports) == ["0", "1"]
        assert {r["env"]["WORLD_SIZE"] for r in reports} == {"2"}
        assert {r["env"]["MASTER_ADDR"] for r in reports} == {address}
    assert not marker.exists()
