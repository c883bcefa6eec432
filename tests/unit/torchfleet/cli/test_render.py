"""`torchfleet render`: the launch and batch scripts from the inventory and cached facts."""

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from cli_helpers import NASTY, run_cli, write_facts, write_inventory
from torchfleet.collection import module_util
from plan_helpers import plan_of

lp = module_util("_on_node.launch_plan")
render = module_util("_on_node.renderer").render


def test_render_json_from_the_fact_cache(project, capsys):
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "--json",
                           "-e", "nproc_per_node=2", "-e", "master_port=29600",
                           "-e", '{"env_secrets": ["WANDB_API_KEY"], "env_set": {"OMP_NUM_THREADS": 4}}',
                           "--", *NASTY)
    assert rc == 0, err
    data = json.loads(out)
    assert {"argv", "command", "hostfile", "nodes", "head", "nproc_per_node", "env", "source"} <= set(data)
    assert data["source"] == "facts" and "cached facts" in err
    assert data["nodes"] == ["gpu01", "gpu02"] and data["head"] == "gpu01"
    assert data["nproc_per_node"] == 2 and data["world_size"] == 4
    assert data["hostfile"] == "10.9.0.11 slots=2\n10.9.0.12 slots=2\n"
    argv = data["argv"]
    assert argv[0] == "/usr/bin/mpirun"
    assert argv[-len(NASTY):] == NASTY  # byte for byte, after sh -c SCRIPT torchfleet
    assert argv[-len(NASTY) - 1] == "torchfleet"
    assert "--rdzv-endpoint=10.9.0.11:29600" in argv[-len(NASTY) - 2]
    assert "/home/trainer/torchfleet/scripts/train.py" in argv[-len(NASTY) - 2]
    assert "/opt/env/bin/torchrun" in argv[-len(NASTY) - 2]
    assert data["env"]["WANDB_API_KEY"] == "<redacted>"
    assert data["env"]["OMP_NUM_THREADS"] == "4"
    assert data["env"]["NCCL_SOCKET_IFNAME"] == "eth1"
    assert data["command"].startswith("/usr/bin/mpirun -np 2 ")


def test_render_text_names_the_parts(project, capsys):
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "-e", "run_id=tf-x1")
    assert rc == 0
    assert "cat > /home/trainer/torchfleet/runs/tf-x1/hostfile <<'EOF'\n10.9.0.11 slots=4\n" in out
    assert "export TORCHFLEET_RUN_ID=tf-x1\n" in out
    # What it prints is a script a shell reads as it is (the cluster tests run it on a head).
    assert subprocess.run(["bash", "-n"], input=out, text=True, check=False).returncode == 0


def test_render_from_the_inventory_without_facts(project, capsys):
    shutil.rmtree(project / ".cache")
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "--json")
    assert rc == 1 and "-e interface=NAME" in err
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "--json",
                           "-e", "interface=eth0", "-e", "launch_mode=rank")
    assert rc == 0, err
    data = json.loads(out)
    assert data["source"] == "inventory" and "inventory alone" in err
    assert data["hostfile"] == "192.0.2.11 slots=1\n192.0.2.12 slots=1\n"
    assert data["env"]["MASTER_ADDR"] == "192.0.2.11" and data["mode"] == "rank"


def test_render_reads_a_hostfile_as_inventory(project, capsys):
    (project / "nodes").write_text("10.1.0.1 slots=2\n10.1.0.2 slots=2\n")
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "nodes", "--json", "-e", "interface=ib0")
    assert rc == 0, err
    data = json.loads(out)
    assert data["nodes"] == ["10.1.0.1", "10.1.0.2"] and data["nproc_per_node"] == 2
    assert data["source"] == "inventory"


def test_render_with_facts_takes_the_inventorys_slots_as_the_launch_does(project, capsys):
    # A hostfile's slots=2 becomes nproc_per_node=2 on each host; the cached GPU count (4) is
    # what auto would take, and the -e value wins over both.
    write_inventory(project / "hosts.yml",
                    {"gpu01": {"ansible_host": "192.0.2.11", "nproc_per_node": 2},
                     "gpu02": {"ansible_host": "192.0.2.12", "nproc_per_node": 2}},
                    torchfleet_head="gpu01", cluster_user_name="trainer")
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["source"] == "facts" and data["hostfile"] == "10.9.0.11 slots=2\n10.9.0.12 slots=2\n"
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "--json", "-e", "nproc_per_node=1")
    assert rc == 0, err
    assert json.loads(out)["hostfile"] == "10.9.0.11 slots=1\n10.9.0.12 slots=1\n"


def test_render_takes_tree_spawn_and_silent_node_timeout_as_the_launch_does(project, capsys):
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "--json")
    assert rc == 0, err
    argv = json.loads(out)["argv"]
    assert "plm_rsh_no_tree_spawn" in argv
    assert argv[argv.index("oob_tcp_keepalive_time") + 1] == "60"  # the default: 120 s in all
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "--json",
                           "-e", "tree_spawn=true", "-e", "launch_silent_node_timeout=0")
    assert rc == 0, err
    argv = json.loads(out)["argv"]
    assert "plm_rsh_no_tree_spawn" not in argv and "oob_tcp_keepalive_time" not in argv


def test_render_mpich_mode_takes_what_setup_read_of_mpiexec(project, capsys):
    # Without MPICH's facts the flavour is not guessed: refused as the launch refuses it.
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "-e", "launch_mode=mpich")
    assert rc == 1 and "launch_mode=mpich runs MPICH's mpiexec, but setup recorded no" in err
    cache = project / ".cache" / "facts"
    for host, address in (("gpu01", "10.9.0.11"), ("gpu02", "10.9.0.12")):
        write_facts(cache, host, address, 4, mpich_mpiexec="/usr/bin/mpiexec.hydra", mpich_found_launcher="hydra")
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "--json", "-e", "launch_mode=mpich")
    assert rc == 0, err
    assert json.loads(out)["argv"][:4] == ["/usr/bin/mpiexec.hydra", "-launcher", "ssh", "-n"]
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "--json", "-e", "launch_mode=mpich",
                           "-e", "mpich_launcher=pals")
    assert rc == 0, err
    assert json.loads(out)["argv"][:6] == ["/usr/bin/mpiexec.hydra", "-n", "2", "--ppn", "1", "--cpu-bind"]


def test_render_plan_error_exits_1(project, capsys):
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "-e", "master_port=80")
    assert rc == 1 and "master_port is '80': give the rendezvous port on the head as a number from 1024 to 65535" in err


FAKE_MPIRUN = """#!/bin/sh
# Prints its argv NUL-separated, then the hostfile and the run id, as a test double.
out="$TF_TEST_OUT"
: > "$out.argv"
for word in "$@"; do printf '%s\\0' "$word" >> "$out.argv"; done
prev=
for word in "$@"; do
  if [ "$prev" = "--hostfile" ]; then cp "$word" "$out.hostfile"; echo "$word" > "$out.path"; fi
  prev=$word
done
printf '%s' "$TORCHFLEET_RUN_ID $NCCL_SOCKET_IFNAME" > "$out.env"
"""


def fake_bin(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("fmt", ["pbs", "slurm"])
def test_batch_script_runs_the_same_launch(project, capsys, fmt):
    rc, script, err = run_cli(capsys, "render", "train.py", "--format", fmt, "--nodes", "2",
                              "--gpus-per-node", "4", "--walltime", "01:00:00", "--queue", "gpu",
                              "--account", "proj1", "-e", "interface=ib0", "--", *NASTY)
    assert rc == 0, err
    prefix = "#PBS" if fmt == "pbs" else "#SBATCH"
    assert script.startswith("#!/bin/bash\n" + prefix)
    if fmt == "pbs":
        assert "#PBS -l select=2:ncpus=1:ngpus=4" in script and "#PBS -q gpu" in script
        assert "#PBS -A proj1" in script and "#PBS -l walltime=01:00:00" in script
    else:
        assert "#SBATCH --nodes=2" in script and "#SBATCH --partition=gpu" in script
        assert "#SBATCH --gpus-per-node=4" in script and "#SBATCH --account=proj1" in script
    # Read by people before they submit it: each option with its value on a line of its own.
    if fmt == "slurm":
        assert "  --mca plm slurm \\\n" in script
    for line in ("  -np 2 \\\n", "  --map-by ppr:1:node \\\n", "  --mca btl tcp,self \\\n",
                 "  -x NCCL_SOCKET_IFNAME \\\n", "  --tag-output \\\n", "  /bin/sh -c 'exec torchrun "):
        assert line in script, script
    path = project / "job.sh"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)

    fake_bin(project, "mpirun", FAKE_MPIRUN)
    env = dict(os.environ, PATH=f"{project / 'bin'}:{os.environ['PATH']}", TF_TEST_OUT=str(project / "out"))
    if fmt == "pbs":
        (project / "nodefile").write_text("n1\nn1\nn2\nn1\nn2\nn2\n")
        env.update(PBS_NODEFILE=str(project / "nodefile"), PBS_JOBID="123.server")
        run_id = "tf-123.server"
    else:
        fake_bin(project, "scontrol", '#!/bin/sh\n[ "$1 $2 $3" = "show hostnames n[1-2]" ] && printf "n1\\nn2\\n"\n')
        env.update(SLURM_JOB_NODELIST="n[1-2]", SLURM_JOB_ID="77")
        run_id = "tf-77"
    subprocess.run(["bash", str(path)], check=True, env=env, cwd=project)

    hostfile_path = (project / "out.path").read_text().strip()
    argv = (project / "out.argv").read_bytes().decode().split("\0")[:-1]
    expected = render(plan_of(
        nodes=(lp.Node("a", "n1", 4, "ib0"), lp.Node("b", "n2", 4, "ib0")), head="a",
        script="train.py", run_id=run_id, hostfile_path=hostfile_path, script_args=tuple(NASTY),
        env_pass=("PATH",),
        # Inside a Slurm allocation mpirun starts its daemons through Slurm, never over ssh.
        mpirun_extra_args=("--mca", "plm", "slurm") if fmt == "slurm" else ()))
    assert expected.argv[0] == "mpirun" and argv == expected.argv[1:]
    assert (project / "out.hostfile").read_text() == "n1 slots=4\nn2 slots=4\n"
    assert (project / "out.env").read_text() == f"{run_id} ib0"
    assert not Path(hostfile_path).exists()  # removed when the job ends


def test_batch_script_refuses_the_wrong_node_count(project, capsys):
    rc, script, err = run_cli(capsys, "render", "train.py", "--format", "pbs", "--nodes", "3",
                              "-e", "interface=ib0")
    (project / "job.sh").write_text(script)
    (project / "nodefile").write_text("n1\nn2\n")
    result = subprocess.run(["bash", "job.sh"], cwd=project, capture_output=True, text=True, check=False,
                            env=dict(os.environ, PBS_NODEFILE=str(project / "nodefile")))
    assert result.returncode == 1 and "rendered for 3 nodes, the job has 2" in result.stderr


def test_batch_needs_nodes(project, capsys):
    rc, out, err = run_cli(capsys, "render", "train.py", "--format", "slurm")
    assert rc == 2 and "--nodes" in err


@pytest.mark.parametrize("fmt, whole, extra", [
    ("slurm", ["#SBATCH --exclusive", "#SBATCH --mem=0"], "#SBATCH --qos=high"),
    ("pbs", ["#PBS -l place=scatter:excl"], "#PBS -l software=abc"),
])
def test_batch_scripts_take_whole_nodes_and_the_sites_own_options(project, capsys, fmt, whole, extra):
    option = "--qos=high" if fmt == "slurm" else "-l software=abc"
    rc, script, err = run_cli(capsys, "render", "train.py", "--format", fmt, "--nodes", "2",
                              "-e", "interface=ib0", "-e", json.dumps({f"{fmt}_extra_args": [option]}))
    assert rc == 0, err
    header = [line for line in script.splitlines() if line.startswith(("#SBATCH", "#PBS"))]
    assert all(line in header for line in whole) and extra in header, header
    # Less than whole nodes, on request.
    rc, script, err = run_cli(capsys, "render", "train.py", "--format", fmt, "--nodes", "2",
                              "-e", "interface=ib0", "-e", "batch_whole_nodes=false")
    assert rc == 0 and not any(line in script for line in whole), script
    # An option that would end the header line (and write a line of the script) is refused.
    rc, script, err = run_cli(capsys, "render", "train.py", "--format", fmt, "--nodes", "2",
                              "-e", "interface=ib0", "-e", json.dumps({f"{fmt}_extra_args": ["--qos=x\nrm -rf ~"]}))
    assert rc == 2 and f"{fmt}_extra_args item" in err and not script
