"""The `torchfleet` command: arguments, exit codes, `render` and its batch scripts (no cluster)."""

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from ansible.parsing.utils.yaml import from_yaml

from torchfleet import cli
from torchfleet.collection import module_util

lp = module_util("_launch_plan")

NASTY = ["$(touch /tmp/x); rm -rf ~", "{{ 7*7 }}", "--", "-e", "", "a b\tc\nd", "'\"\\", "é✓",
         "--help", "@file", "x=1", "true", "null", "1", "~", "{% raw %}", "{#"]


def run_cli(capsys, *argv):
    try:
        rc = cli.main(list(argv))
    except SystemExit as exit_:
        rc = exit_.code
    out, err = capsys.readouterr()
    return rc, out, err


def write_inventory(path: Path, hosts: dict, **group_vars) -> Path:
    path.write_text(json.dumps({"all": {"children": {"cluster": {
        "hosts": hosts, "vars": group_vars}}}}))
    return path


def tagged(value):
    names = {dict: "Dict", str: "Str", int: "Int", list: "List"}
    return {"value": value, "tags": [], "__ansible_type": "_AnsibleTagged" + names[type(value)]}


def write_facts(cache: Path, host: str, address: str, gpus: int, legacy: bool = False, **more):
    facts = {"preflight_net": {"interface": "eth1", "address": address, "network": "10.9.0.0/24"},
             "preflight_gpu_count": gpus, "python_env_python": "/opt/env/bin/python",
             "python_env_torchrun": "/opt/env/bin/torchrun", "openmpi_mpirun": "/usr/bin/mpirun",
             **more}
    cache.mkdir(exist_ok=True)
    if legacy:  # ansible-core before 2.19: plain JSON in a file named after the host
        (cache / host).write_text(json.dumps(facts))
    else:  # 2.19: schema prefix, a JSON payload, tagged values
        payload = {key: tagged(value) for key, value in facts.items()}
        (cache / f"s1_{host}").write_text(json.dumps({"__payload__": json.dumps(payload)}))


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A directory with a script, a two-node inventory and a fact cache, as after setup."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / ".cache" / "facts"))
    (tmp_path / "train.py").write_text("print('hi')\n")
    write_inventory(tmp_path / "hosts.yml",
                    {"gpu01": {"ansible_host": "192.0.2.11"}, "gpu02": {"ansible_host": "192.0.2.12"}},
                    torchfleet_head="gpu01", cluster_user_name="trainer")
    cache = tmp_path / ".cache" / "facts"
    cache.mkdir(parents=True)
    write_facts(cache, "gpu01", "10.9.0.11", 4,
                cluster_user_account={"name": "trainer", "home": "/home/trainer",
                                      "scripts": "/home/trainer/torchfleet/scripts"})
    write_facts(cache, "gpu02", "10.9.0.12", 4, legacy=True)
    return tmp_path


# --- arguments and exit codes ------------------------------------------------------------------

def test_bad_option_exits_2_with_a_message(capsys):
    rc, out, err = run_cli(capsys, "launch", "--no-such-option", "train.py")
    assert rc == 2
    assert "unrecognized arguments: --no-such-option" in err


def test_missing_script_exits_2(capsys):
    rc, out, err = run_cli(capsys, "launch", "-i", "hosts.yml")
    assert rc == 2
    assert "required: SCRIPT" in err


def test_no_subcommand_exits_2(capsys):
    rc, out, err = run_cli(capsys)
    assert rc == 2 and "required" in err


def test_script_that_does_not_exist_exits_2(project, capsys):
    rc, out, err = run_cli(capsys, "launch", "nope.py", "-i", "hosts.yml")
    assert rc == 2
    assert "script nope.py not found" in err


def test_missing_inventory_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    rc, out, err = run_cli(capsys, "render", "train.py")
    assert rc == 2 and "no inventory" in err
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "missing.yml")
    assert rc == 2 and "missing.yml does not exist" in err


def test_script_args_only_for_launch_and_render(capsys):
    rc, out, err = run_cli(capsys, "status", "--", "--epochs", "1")
    assert rc == 2 and "takes no script arguments" in err


def test_bad_run_id_exits_2(project, capsys):
    rc, out, err = run_cli(capsys, "stop", "a;b", "-i", "hosts.yml")
    assert rc == 2 and "run id" in err


def test_cluster_subcommand_still_parses():
    args = cli.build_parser().parse_args(["cluster", "up", "--nodes", "2", "--name", "x"])
    assert (args.action, args.nodes, args.name) == ("up", 2, "x")


def test_script_args_reach_ansible_untemplated_byte_for_byte():
    parser = cli.build_parser()
    args = parser.parse_args(["launch", "train.py", "-e", "nproc_per_node=1"])
    cmdline = cli._playbook_args(args, script="/p/train.py", script_args=NASTY)
    assert cmdline[:2] == ["-e", "nproc_per_node=1"]
    assert cmdline[2] == "-e"
    data = from_yaml(cmdline[3])  # what ansible-playbook does with -e '{...}'
    assert data["script_args"] == NASTY and data["script"] == "/p/train.py"
    assert [type(item) for item in data["script_args"]] != [str] * 0
    assert all(isinstance(item, str) for item in data["script_args"])
    # !unsafe where Jinja could see a template: Ansible never templates them.
    assert '!unsafe "{{ 7*7 }}"' in cmdline[3] and '!unsafe "{% raw %}"' in cmdline[3]


# --- render ------------------------------------------------------------------------------------

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
    # Without MPICH's facts the flavour is not guessed.
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "-e", "launch_mode=mpich")
    assert rc == 1 and "mpich mode needs to know which mpiexec it runs" in err
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
    assert rc == 1 and "port 80 is not usable" in err


# --- batch scripts -----------------------------------------------------------------------------

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
    expected = lp.render(lp.Plan(
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


# --- progress from the event stream ------------------------------------------------------------

def events():
    yield {"event": "playbook_on_task_start", "event_data": {"task": "Install"}}
    for host in ("n1", "n2"):
        yield {"event": "runner_on_start", "event_data": {"host": host, "task": "Install"}}
        yield {"event": "runner_on_ok", "event_data": {"host": host, "task": "Install",
                                                       "res": {"changed": host == "n1"}}}
    yield {"event": "runner_on_failed", "event_data": {"host": "n2", "task": "Check", "res": {"msg": "no GPU"}}}
    yield {"event": "runner_on_unreachable", "event_data": {"host": "n1", "task": "Check",
                                                            "res": {"msg": "ssh: timed out"}}}
    yield {"event": "playbook_on_stats", "event_data": {"changed": {"n1": 1}}}


@pytest.mark.parametrize("live", [False, True])
def test_progress_counts_hosts_and_keeps_failures(tmp_path, live):
    import io

    from torchfleet.run import Progress
    stream = io.StringIO()
    progress = Progress(stream=stream, live=live)
    (tmp_path / "command").write_text('{"env": {"SECRET": "x"}}')
    progress._artifacts = tmp_path
    for event in events():
        progress(event)
    assert not (tmp_path / "command").exists()  # the environment never stays on disk
    assert (progress.hosts["n1"].done, progress.hosts["n1"].changed, progress.hosts["n1"].failed) == (2, 1, 1)
    assert progress.failures == {
        "n2": {"task": "Check", "msg": "no GPU", "unreachable": False},
        "n1": {"task": "Check", "msg": "ssh: timed out", "unreachable": True}}
    assert progress.stats == {"changed": {"n1": 1}}
    text = stream.getvalue()
    if live:
        assert "\x1b[2F" in text and "FAILED" in text  # redraws its two lines in place
    else:
        assert "torchfleet: Install\n" in text and "torchfleet: n2: FAILED: Check\n" in text


@pytest.mark.parametrize("values", [
    ["script=train.py", "nproc_per_node=2", "launch_mode=rank", "empty=", "path=/a/b-c.d:e", "n=-3", "x=1", "x=2"],
    ["a=1 b=2"], ["a='x y'"], ['{"run_id": "r1", "n": 2}'], ["n: 3"], ["a=b=c"], ['a="q"'], ["x=1", '{"x": 2}']])
def test_extra_vars_without_ansibles_loader_read_as_with_it(values):
    """Plain KEY=VALUE values are read without Ansible's loader (its imports are 0.2 s of every
    launch): the same variables (or error) as Ansible's splitter and loader give; anything else
    goes to them."""
    from torchfleet import extra_vars

    def outcome(parse):
        try:
            return parse(values)
        except extra_vars.RenderError as error:
            return str(error)
    assert outcome(extra_vars.parse_extra_vars) == outcome(extra_vars._parsed_by_ansible)
    plain = all(extra_vars._PLAIN_KEY_VALUE.match(value) for value in values)
    assert plain == (values[0] == "script=train.py")


def test_the_live_display_fits_80_columns_and_redraws_exactly_its_lines():
    import io
    import re

    from torchfleet.run import Progress
    stream = io.StringIO()
    progress = Progress(stream=stream, live=True, width=80)
    long_task = "Install the Python environment from the wheelhouse the controller sent into the cluster"
    for host in ("gpu-node-with-a-long-name-0001.example.org", "n2"):
        for _count in range(3):
            progress({"event": "runner_on_ok", "event_data": {"host": host, "task": long_task, "res": {}}})
    frames = stream.getvalue().split("\x1b[2F")
    last = frames[-1]
    rows = [re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", row) for row in last.split("\n") if row]
    assert len(rows) == 2 and all(len(row) <= 79 for row in rows), rows
    assert rows[1].startswith("n2 ") and "3 tasks" in rows[1]


def test_command_lines_pair_options_with_their_values():
    from torchfleet.collection import module_util
    command_lines = module_util("_batch_script").command_lines

    raw = ["mpiexec", "-n", "2", "--ppn", "1", "--envall", "--mca", "a", "b", "-x", "N", "--tag-output",
           "/bin/sh", "-c", "exec x", "torchfleet", "--epochs", "3"]
    assert command_lines(raw, raw, "/bin/sh") == [
        "mpiexec", "-n 2", "--ppn 1", "--envall", "--mca a b", "-x N", "--tag-output",
        "/bin/sh -c exec x", "torchfleet --epochs 3"]


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


def test_version_completion_and_exit_codes_in_help(capsys):
    rc, out, err = run_cli(capsys, "--version")
    assert rc == 0 and out.strip() == f"torchfleet {cli.__version__}"
    for command in ("launch", "wait", "logs", "stop", "runs", "status", "render", "setup"):
        rc, out, err = run_cli(capsys, command, "--help")
        assert rc == 0 and "exit: " in out, (command, out)
    # Shell completion through argcomplete (the completion extra), as bash asks for it.
    # It writes the words to descriptor 8.
    done = subprocess.run(["sh", "-c", '"$0" 8>&1 9>/dev/null', shutil.which("torchfleet")],
                          capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, COMP_LINE="torchfleet logs --ra", COMP_POINT="20",
                                   _ARGCOMPLETE="1", _ARGCOMPLETE_IFS="\n"))
    assert done.returncode == 0 and done.stdout.split() == ["--rank"], done.stdout + done.stderr


@pytest.mark.parametrize("argv, said", [
    (["stop", "tf-1", "--all"], "give a run id or --all, not both"),
    (["runs", "--keep", "3"], "add --prune"),
    (["runs", "--prune"], "--prune needs --keep N"),
    (["runs", "-n", "0"], "-n takes a number of at least 1"),
    (["runs", "--limit", "node1"], "--limit does not apply"),
    (["logs", "--rank", "1", "--all-ranks"], "not allowed with argument"),
    (["restart"], "the following arguments are required: RUN_ID"),
    (["restart", "a;b"], "run id"),
])
def test_usage_errors_name_the_fix(project, capsys, argv, said):
    rc, out, err = run_cli(capsys, *argv, "-i", "hosts.yml")
    assert rc == 2 and said in err, err


def test_vaulted_extra_vars_and_ansibles_own_options(project, capsys):
    (project / "pass.txt").write_text("s3cret\n")
    (project / "vars.yml").write_text("nproc_per_node: 3\nrun_id: from-the-vault\n")
    subprocess.run(["ansible-vault", "encrypt", "--vault-password-file", "pass.txt", "vars.yml"],
                   cwd=project, check=True, capture_output=True)
    assert (project / "vars.yml").read_text().startswith("$ANSIBLE_VAULT")
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "-e", "@vars.yml", "--json")
    assert rc == 1 and "-e @vars.yml is encrypted with Ansible Vault: give --vault-password-file" in err, err
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "-e", "@vars.yml",
                           "--vault-password-file", "pass.txt", "--json")
    assert rc == 0, err
    assert json.loads(out)["world_size"] == 6  # 3 workers on each of the two nodes
    rc, out, err = run_cli(capsys, "render", "train.py", "-i", "hosts.yml", "-e", "@vars.yml",
                           "--vault-password-file", "nowhere.txt")
    assert rc == 1 and "--vault-password-file nowhere.txt" in err, err
    # The options ansible-playbook takes reach it as given.
    args = cli.build_parser().parse_args(["setup", "-u", "admin", "--private-key", "~/.ssh/k", "--forks", "50",
                                          "--vault-password-file", "pass.txt", "-K", "-e", "x=1"])
    assert cli._playbook_args(args) == ["--user", "admin", "--private-key", "~/.ssh/k", "--forks", "50",
                                        "--vault-password-file", "pass.txt", "--ask-become-pass", "-e", "x=1"]
    args.become_password = "pw"
    assert list(cli._passwords(args).values()) == ["pw"]


def test_the_fact_cache_is_never_in_the_directory_the_command_runs_from(tmp_path, monkeypatch):
    from torchfleet import collection, run as runner

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert runner.fact_cache_dir() == collection.CHECKOUT / ".cache" / "facts"  # where the checkout's playbooks cache
    monkeypatch.setattr(runner, "checkout", lambda: None)  # installed from the wheel
    assert runner.fact_cache_dir() == tmp_path / "state" / "torchfleet" / "fact_cache"
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", "/srv/facts")
    assert runner.fact_cache_dir() == Path("/srv/facts")


def test_runs_of_every_account_join_the_board_and_slurms_queue_once_each():
    own = [{"run_id": "tf-mine", "state": "running", "started": "2026-11-27T01:00:00+00:00"}]
    found = {"user": "alice",
             "others": [{"run_id": "tf-bobs", "account": "bob", "state": "running", "started": "2026-11-27T02:00:00+00:00",
                         "world_size": 3}],
             "jobs": [{"job_id": "7", "name": "tf-bobs", "user": "bob", "state": "RUNNING", "submitted": "2026-11-27T01:59:00"},
                      {"job_id": "8", "name": "bert.sh", "user": "carol", "state": "PENDING", "submitted": "2026-11-27T03:00:00"},
                      {"job_id": "6", "name": "tf-mine", "user": "alice", "state": "RUNNING", "submitted": "2026-11-27T00:59:00"}]}
    every = cli._every_accounts(own, found)
    assert [(run["run_id"], run["account"], run["state"], run.get("job_id")) for run in every] == [
        ("bert.sh", "carol", "pending", "8"),  # a job torchfleet did not submit, from squeue
        ("tf-bobs", "bob", "running", "7"),    # from the board, with its job
        ("tf-mine", "alice", "running", "6")]   # this account's record, its job from the queue
