"""Bad input, one catalogue (issue 6): inventories, hostfiles, extra variables, CLI arguments.

Every case runs against the session's ready cluster and must exit non-zero, print a message that
names the problem and the fix, and leave every node as it was: the training account's files,
known_hosts, the wheelhouse and the training account's processes are compared before and after.
"""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from ready_cluster import NODES, run

pytestmark = pytest.mark.cluster

SCRIPT = "examples/train.py"
HEAD = NODES[0]
# What a launch or a setup would touch on a node, every file with size and mtime, and the training
# account's processes (pgrep exits 1 when there are none). One mtime is left out: that of Ansible's
# scratch directory ~/.ansible/tmp, where every module run as the training account (a check-mode
# render on the head, say) makes and removes a directory of its own; what it holds is still listed.
# And one directory: ~/.local/state/torchfleet, made by setup, holds the head's launch lock, which
# every launch takes before its checks (and writes its run's name into, for a launch meanwhile).
STATE = ("find /home/torchfleet /etc/ssh/ssh_known_hosts /opt/torchfleet/wheelhouse "
         "\\( -path /home/torchfleet/.local/state/torchfleet -prune \\) -o "
         "\\( -path /home/torchfleet/.ansible/tmp -printf '%p %s\\n' \\) -o -printf '%p %s %T@\\n' | sort; "
         "echo '# processes of torchfleet:'; pgrep -u torchfleet -a; "
         "echo '# Slurm jobs:'; squeue -h -o '%i %j %T'")
PORT_HOLDER = "tfbad-port-holder"  # marks the listener of the taken-port case, to find its pid


def node_state(node):
    result = run(["docker", "exec", node, "sh", "-c", STATE], timeout=60)
    assert "/home/torchfleet " in result.stdout, result.stderr
    return result.stdout


def cluster_state():
    with ThreadPoolExecutor(len(NODES)) as pool:
        return dict(zip(NODES, pool.map(node_state, NODES)))


# --- how a case runs: each returns command(cluster, tmp_path) -> (returncode, output) -------------

def launch(*extra):
    """ansible-playbook launch.yml on the cluster's own inventory."""
    return lambda cluster, tmp: cluster.launch(*extra)


def setup(*extra):
    """ansible-playbook setup.yml on the cluster's own inventory."""
    return lambda cluster, tmp: cluster.setup(*extra)


def cluster_inventory(change):
    """The cluster's real inventory, as change(group) leaves it: it connects, so a missing check
    would let the play reach the nodes."""
    def text(cluster):
        data = yaml.safe_load(cluster.inventory.read_text())
        change(data["all"]["children"]["cluster"])
        return yaml.safe_dump(data, sort_keys=False)
    return text


def playbook_with(name, files, *extra, inventory="hosts.yml"):
    """ansible-playbook NAME -i tmp/INVENTORY, after writing `files` ({name: text or
    text(cluster)}) into tmp; {tmp} in `extra` is that directory."""
    def command(cluster, tmp):
        for file_name, text in files.items():
            (tmp / file_name).write_text(text(cluster) if callable(text) else text)
        result = run(["ansible-playbook", name, "-i", str(tmp / inventory),
                      *(arg.replace("{tmp}", str(tmp)) for arg in extra)],
                     env=cluster.env, timeout=600)
        return result.returncode, result.stdout + result.stderr
    return command


def hostfile_launch(text, fmt="auto"):
    """launch.yml on an inventory of the torchfleet.cluster.hostfile plugin reading `text`."""
    config = f"plugin: torchfleet.cluster.hostfile\npath: hosts.txt\nformat: {fmt}\n"
    return playbook_with("launch.yml", {"cluster.hostfile.yml": config, "hosts.txt": text},
                         "-e", f"script={SCRIPT}", inventory="cluster.hostfile.yml")


def cli(*args, files=None):
    """python -m torchfleet ARGS; {inventory} is the cluster's, {tmp} the case's directory."""
    def command(cluster, tmp):
        for file_name, text in (files or {}).items():
            (tmp / file_name).write_text(text)
        result = cluster.torchfleet(*(arg.format(inventory=cluster.inventory, tmp=tmp) for arg in args))
        return result.returncode, result.stdout + result.stderr
    return command


def holding_port(port, command):
    """`command` while something else listens on `port` on the head."""
    def held(cluster, tmp):
        code = ("import socket, time; s = socket.socket(); "
                "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                f"s.bind(('', {port})); s.listen(); time.sleep(300)  # {PORT_HOLDER}")
        started = run(["docker", "exec", "-d", HEAD, "python3", "-c", code], timeout=60)
        assert started.returncode == 0, started.stderr
        try:
            for attempt in range(30):
                if f":{port} " in run(["docker", "exec", HEAD, "ss", "-ltn"], timeout=60).stdout:
                    break
                time.sleep(1)
            return command(cluster, tmp)
        finally:
            pids = run(["docker", "exec", HEAD, "pgrep", "-f", PORT_HOLDER], timeout=60).stdout.split()
            for pid in pids:
                run(["docker", "exec", HEAD, "kill", pid], timeout=60)
    return held


def changed_nodes(before, after, command):
    """`command` while the nodes have been changed by `before` ([node, argv...] lists, run as
    root; the node None means the head), undone by `after` whatever happens."""
    def changed(cluster, tmp):
        try:
            for node, *argv in before:
                done = run(["docker", "exec", node or HEAD, *argv], timeout=60)
                assert done.returncode == 0, done.stderr
            return command(cluster, tmp)
        finally:
            for node, *argv in after:
                run(["docker", "exec", node or HEAD, *argv], timeout=60)
    return changed


def slurm_changed(before, after, command):
    """`command` while the head's Slurm (or its files) has been changed by `before` (argv lists)."""
    return changed_nodes([[None, *argv] for argv in before], [[None, *argv] for argv in after], command)


def slurm_launch(*extra):
    return launch("-e", f"script={SCRIPT}", "-e", "scheduler=slurm", *extra)


def partition(name, *settings):
    return [["scontrol", "create", f"PartitionName={name}", *settings]], [["scontrol", "delete", f"PartitionName={name}"]]


# --- the catalogue ------------------------------------------------------------------------------

CASES = [
    # A launch through Slurm: refused on the controller or by the head's Slurm, before sbatch.
    pytest.param(slurm_launch("-e", "slurm_partition=nosuch"),
                 ["Slurm has no partition 'nosuch' (it has torchfleet)", "name one of them in slurm_partition"],
                 id="slurm-unknown-partition"),
    pytest.param(slurm_changed(*partition("tfsmall", "Nodes=node[0-1]"), slurm_launch("-e", "slurm_partition=tfsmall")),
                 ["the launch needs 3 nodes, Slurm partition tfsmall has 2", "launch on fewer nodes"],
                 id="slurm-partition-with-fewer-nodes"),
    pytest.param(slurm_changed(*partition("tfdown", "Nodes=ALL", "State=DOWN"),
                               slurm_launch("-e", "slurm_partition=tfdown")),
                 ["Slurm partition tfdown is DOWN: no job would start"], id="slurm-partition-down"),
    pytest.param(slurm_changed(*partition("tfshort", "Nodes=ALL", "MaxTime=10"),
                               slurm_launch("-e", "slurm_partition=tfshort", "-e", "slurm_time_limit=30")),
                 ["slurm_time_limit 30 is above partition tfshort's limit 00:10:00", "give 00:10:00 or less"],
                 id="slurm-time-limit-above-the-partitions"),
    pytest.param(slurm_launch("-e", "slurm_time_limit=1h"),
                 ["slurm_time_limit '1h' is not a Slurm time limit", "HH:MM:SS (01:30:00)"],
                 id="slurm-time-limit-malformed"),
    pytest.param(slurm_changed([["mv", "/usr/bin/sbatch", "/usr/bin/sbatch.tf-moved"]],
                               [["mv", "/usr/bin/sbatch.tf-moved", "/usr/bin/sbatch"]], slurm_launch()),
                 [f"the head {HEAD} has no sbatch and scontrol", "install Slurm's client commands there"],
                 id="slurm-no-sbatch-on-the-head"),
    pytest.param(slurm_launch("-e", "launch_mode=mpich"),
                 ["launch_mode=mpich (MPICH's mpiexec) cannot run under it", "use launch_mode=torchrun or rank"],
                 id="slurm-with-mpich-mode"),
    pytest.param(slurm_launch("-e", "tree_spawn=true"),
                 ["Slurm starts mpirun's daemons, so tree_spawn cannot apply"], id="slurm-with-tree-spawn"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "scheduler=pbs"),
                 ["scheduler is 'pbs'", "torchfleet render --format pbs"], id="scheduler-pbs"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "slurm_partition=torchfleet"),
                 ["slurm_partition given without -e scheduler=slurm"], id="slurm-option-without-the-scheduler"),
    # Slurm, NFS and Open MPI's Slurm support need one UID for the training account everywhere.
    pytest.param(changed_nodes([[NODES[1], "useradd", "-u", "2001", "tfuid"], [NODES[2], "useradd", "-u", "2002", "tfuid"]],
                               [[NODES[1], "userdel", "tfuid"], [NODES[2], "userdel", "tfuid"]],
                               setup("-e", "cluster_user_name=tfuid")),
                 [f"The training account tfuid has different UIDs on the nodes: UID 2001 on {NODES[1]}; "
                  f"UID 2002 on {NODES[2]}", "set cluster_user_uid=N to pin it on every node"],
                 id="setup-training-account-uids-differ"),
    pytest.param(cli("launch", "-i", "{inventory}", "--scheduler", "lsf", SCRIPT),
                 ["argument --scheduler: invalid choice: 'lsf'"], id="cli-unknown-scheduler"),
    # Inventories (checked on the controller before any play reaches a node).
    pytest.param(playbook_with("setup.yml", {"hosts.yml": "all:\n  children:\n    cluster:\n      hosts: {}\n"}),
                 ["The inventory has no hosts in group 'cluster'", "List your nodes under 'cluster:'"],
                 id="inventory-empty-cluster-group"),
    pytest.param(playbook_with("setup.yml",
                               {"hosts.yml": cluster_inventory(
                                   lambda group: group["hosts"].update(again=dict(group["hosts"][NODES[1]])))}),
                 [f"{NODES[1]} and again are both", "keep one name per machine"],
                 id="inventory-one-machine-under-two-names"),
    pytest.param(playbook_with("setup.yml",
                               {"hosts.yml": cluster_inventory(
                                   lambda group: group["vars"].update(torchfleet_head="gpu99"))}),
                 ["torchfleet_head is 'gpu99', which is not in group 'cluster'",
                  "Set torchfleet_head to one of those hosts"],
                 id="inventory-head-outside-the-group"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "torchfleet_head=gpu99"),
                 ["torchfleet_head is 'gpu99', which is not in group 'cluster'",
                  "Set torchfleet_head to one of those hosts"],
                 id="launch-head-outside-the-group"),
    pytest.param(setup("--limit", NODES[1]),
                 [f"This play runs on 1 of the 3 nodes (left out: {HEAD}, {NODES[2]})", "run without --limit"],
                 id="setup-limit-leaves-nodes-out"),
    pytest.param(launch("-e", f"script={SCRIPT}", "--limit", f"{NODES[1]},{NODES[2]}"),
                 [f"The head {HEAD} is left out of this run (by --limit or exclude)", "-e torchfleet_head=NODE"],
                 id="launch-limit-leaves-the-head-out"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "exclude=gpu9"),
                 ["exclude names gpu9, not a node of group 'cluster'", "give the names the inventory lists"],
                 id="launch-exclude-names-no-node"),
    pytest.param(playbook_with("launch.yml",
                               {"hosts.yml": cluster_inventory(
                                   lambda group: group["hosts"][NODES[1]].update(nproc_per_node=2))},
                               "-e", f"script={SCRIPT}"),
                 ["nproc_per_node differs between nodes", f"2 on {NODES[1]}", "-e nproc_per_node=N"],
                 id="inventory-non-uniform-slots-torchrun"),
    # Hostfiles through the torchfleet.cluster.hostfile inventory plugin.
    pytest.param(hostfile_launch(f"{HEAD} slots=1\n{NODES[1]} slots=1\n{HEAD} slots=1\n", "mpi"),
                 [f"hosts.txt, line 3: host '{HEAD}' is listed again (first on line 1)", "list each host once"],
                 id="hostfile-duplicate-host"),
    pytest.param(hostfile_launch(f"{HEAD} slots=1\n{NODES[1]} slots=0\n"),
                 ["hosts.txt, line 2: bad slot count in 'slots=0': '0' is not a whole number of 1 or more"],
                 id="hostfile-slots-zero"),
    pytest.param(hostfile_launch(f"{HEAD[:-1]}[2-0]\n", "slurm"),
                 [f"hosts.txt, line 1: range '2-0' in '{HEAD[:-1]}[2-0]' runs backwards", "write the lower number first (0-2)"],
                 id="hostfile-slurm-range-backwards"),
    pytest.param(hostfile_launch(""),
                 ["hosts.txt, line 1: the file is empty", "list one host per line"],
                 id="hostfile-empty"),
    # Hostfiles given to the torchfleet command.
    pytest.param(cli("launch", SCRIPT, "-i", "{tmp}/hosts", files={"hosts": "node[01-\n"}),
                 ["hosts, line 1: unclosed '[' in Slurm nodelist 'node[01-'", "close the range with ']'"],
                 id="cli-hostfile-slurm-unclosed"),
    pytest.param(cli("launch", SCRIPT, "-i", "{tmp}/hosts",
                     files={"hosts": f"{HEAD} slots=2\n{NODES[1]} slots=1\n{NODES[2]} slots=1\n"}),
                 ["nproc_per_node differs between nodes", f"2 on {HEAD}"],
                 id="cli-hostfile-non-uniform-slots"),
    # Launch variables.
    pytest.param(launch(),
                 ["Name the training script: ansible-playbook launch.yml -e script=train.py"],
                 id="launch-no-script"),
    pytest.param(launch("-e", "script=examples/no_such_script.py"),
                 ["The script examples/no_such_script.py is not a file on the controller"],
                 id="launch-script-missing"),
    pytest.param(launch("-e", "script=examples"),
                 ["The script examples is not a file on the controller"],
                 id="launch-script-is-a-directory"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", '{"files": ["examples/no_such_data.csv"]}'),
                 ["These files are not on the controller: examples/no_such_data.csv"],
                 id="launch-files-missing"),
    pytest.param(playbook_with("launch.yml", {"hosts.yml": cluster_inventory(lambda group: None),
                                              "weights.bin": "0" * (17 * 2**20)},
                               "-e", f"script={SCRIPT}", "-e", '{"files": ["{tmp}/weights.bin"]}'),
                 ["The script and its files come to 17.0 MiB", "weights.bin 17.0 MiB",
                  "over the 16 MiB a launch carries", "shared_storage=true"],
                 id="launch-files-too-large"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "launch_mode=horovod"),
                 ["value of launch_mode must be one of: torchrun, rank, mpich, got: horovod"],
                 id="launch-unknown-mode"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "master_port=0"),
                 ["master_port is '0'", "1024 to 65535"],
                 id="launch-port-zero"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "master_port=70000"),
                 ["master_port is '70000'", "1024 to 65535"],
                 id="launch-port-out-of-range"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "master_port=abc"),
                 ["master_port is 'abc'", "1024 to 65535"],
                 id="launch-port-not-a-number"),
    pytest.param(holding_port(29500, launch("-e", f"script={SCRIPT}")),
                 [f"the rendezvous port 29500 is already in use on the head {HEAD}", "-e master_port=N"],
                 id="launch-port-taken-on-head"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "nproc_per_node=0"),
                 ["nproc_per_node is '0'", "a whole number of workers per node"],
                 id="launch-nproc-zero"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "nproc_per_node=two"),
                 ["nproc_per_node is 'two'", "a whole number of workers per node"],
                 id="launch-nproc-not-a-number"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", '{"script_args": "--epochs 3"}'),
                 ["script_args must be a list", '-e \'{"script_args": ["--epochs", "3"]}\'', 'it is "--epochs 3"'],
                 id="launch-script-args-a-string"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", '{"env_pass": ["BAD-NAME"]}'),
                 ["env_pass: 'BAD-NAME' is not a valid environment variable name", "use letters, digits and '_' only"],
                 id="launch-env-pass-not-a-name"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "env_secrets=WANDB_API_KEY"),
                 ["env_secrets must be a list", '{"env_secrets": ["WANDB_API_KEY"]}'],
                 id="launch-env-secrets-a-string"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", '{"env_secrets": ["TFBAD_NEVER_SET_SECRET"]}'),
                 ["These secrets are not set in the controller's environment: TFBAD_NEVER_SET_SECRET",
                  "Export them"],
                 id="launch-env-secret-unset"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", '{"env_set": {"1X": "y"}}'),
                 ["env_set: '1X' is not a valid environment variable name", "not starting with a digit"],
                 id="launch-env-set-not-a-name"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", '{"env_set": {"MASTER_ADDR": "10.0.0.9"}}'),
                 ["env_set: MASTER_ADDR is set by torchfleet itself; remove it"],
                 id="launch-env-set-reserved-name"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", '{"mpirun_extra_args": "--mca x y; rm -rf ~"}'),
                 ["mpirun_extra_args must be a list", '"--mca", "btl_tcp_links", "2"', 'it is "--mca x y; rm -rf ~"'],
                 id="launch-mpirun-args-a-shell-string"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", '{"mpirun_extra_args": ["--mca", "x", "y; rm -rf ~"]}'),
                 ["mpirun_extra_args holds 'y; rm -rf ~'", "no shell reads", "each value as its own list item"],
                 id="launch-mpirun-args-shell-metacharacters"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", '{"mpirun_extra_args": ["-np", "4"]}'),
                 ["mpirun_extra_args: '-np' overrides an option torchfleet controls; remove it"],
                 id="launch-mpirun-args-owned-option"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "log_dir=runs"),
                 ["log_dir is 'runs': give an absolute path on the nodes"],
                 id="launch-log-dir-relative"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "launch_timeout=-5"),
                 ["launch_timeout must be 0 or more seconds, got -5"],
                 id="launch-timeout-negative"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "launch_silent_node_timeout=-1"),
                 ["silent_node_timeout must be 0 or more seconds, got -1"],
                 id="launch-silent-node-timeout-negative"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e",
                        '{"mpirun_extra_args": ["--mca", "oob_tcp_keepalive_time", "5"]}'),
                 ["'--mca oob_tcp_keepalive_time' overrides the keepalive torchfleet sets from "
                  "silent_node_timeout; remove it, and set silent_node_timeout instead"],
                 id="launch-mpirun-args-own-keepalive"),
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "run_id=../../etc"),
                 ["run_id '../../etc' is not valid; use 1 to 64 characters"],
                 id="launch-run-id-a-path"),
    pytest.param(launch("-e", "launch_action=resume"),
                 ["value of launch_action must be one of: start, stop, restart, got: resume"],
                 id="launch-unknown-action"),
    pytest.param(launch("-e", "launch_action=restart"),
                 ["launch_action=restart starts a run that ended again: name it with -e run_id=RUN_ID"],
                 id="launch-restart-without-run-id"),
    pytest.param(launch("-e", "launch_action=restart", "-e", "run_id=tf-no-such-run"),
                 ["refusing to restart: no run tf-no-such-run in /home/torchfleet/torchfleet/runs on this node"],
                 id="launch-restart-unknown-run"),
    # launch.yml's stop before launch_action: Ansible reserves the name `action`.
    pytest.param(launch("-e", "action=stop"),
                 ["-e action=stop: Ansible reserves the name action; use -e launch_action=stop"],
                 id="launch-reserved-name-action"),
    # What setup records with python_env_engine=none: no torchrun for the torchrun mode to run.
    pytest.param(launch("-e", f"script={SCRIPT}", "-e", "python_env_torchrun="),
                 ["launch_mode=torchrun runs torchrun, but setup recorded none", "use -e launch_mode=rank"],
                 id="launch-torchrun-mode-without-torchrun"),
    # Setup variables.
    pytest.param(setup("-e", "python_env_engine=pixi"),
                 ["python_env_engine is 'pixi', which torchfleet does not know", "Use venv"],
                 id="setup-unknown-python-env-engine"),
    pytest.param(setup("-e", '{"python_env_packages": ["torch>=2.0", "numpy"]}'),
                 ["torch must be pinned with ==", "the spec says 'torch>=2.0'", "write for example torch==2.13.0"],
                 id="setup-unpinned-torch"),
    pytest.param(setup("-e", "mpi_implementation=intelmpi"),
                 ["value of mpi_implementation must be one of: openmpi, mpich, got: intelmpi"],
                 id="setup-unknown-mpi"),
    pytest.param(setup("-e", "mpi_implementation=mpich", "-e", "mpich_source=existing"),
                 ["mpich_source is 'existing' but mpich_prefix is ''", "set it to the absolute prefix"],
                 id="setup-mpich-existing-without-prefix"),
    pytest.param(setup("-e", "fault_tolerance=elastic"),
                 ["fault_tolerance is 'elastic', which setup does not know", "Use -e fault_tolerance=torchft"],
                 id="setup-unknown-fault-tolerance"),
    # The torchfleet command's own arguments.
    pytest.param(cli("launch", "-i", "{inventory}"),
                 ["the following arguments are required: SCRIPT"],
                 id="cli-launch-without-script"),
    pytest.param(cli("launch", SCRIPT, "-i", "{inventory}", "--nodes", "3"),
                 ["unrecognized arguments: --nodes 3"],
                 id="cli-unknown-option"),
    pytest.param(cli("render", SCRIPT, "-i", "{inventory}", "--format", "xyz"),
                 ["argument --format: invalid choice: 'xyz'"],
                 id="cli-render-unknown-format"),
    pytest.param(cli("launch", SCRIPT, "-i", "{tmp}/no-such-inventory"),
                 ["no-such-inventory does not exist; give -i the path of an Ansible inventory or of an MPI/PBS/Slurm hostfile"],
                 id="cli-inventory-missing"),
    pytest.param(cli("launch", "examples/no_such_script.py", "-i", "{inventory}"),
                 ["script examples/no_such_script.py not found (give the training script's path)"],
                 id="cli-launch-script-missing"),
    pytest.param(cli("stop", "x;reboot", "-i", "{inventory}"),
                 ["run id 'x;reboot' is not valid (letters, digits"],
                 id="cli-stop-bad-run-id"),
    pytest.param(cli("launch", SCRIPT, "-i", "{inventory}", "-e", "@{tmp}/no-such-vars.yml"),
                 ["no-such-vars.yml: no such file; give the path of a YAML or JSON file of variables"],
                 id="cli-extra-vars-file-missing"),
]


@pytest.fixture(scope="module")
def last_state(cluster):
    """The nodes' state as the last case left it, which is as the first found it unless a case
    failed: one reading per case, not two (the cases run one after another on one worker)."""
    return {"state": cluster_state()}


@pytest.mark.parametrize("command, expected", CASES)
def test_bad_input_is_refused_and_no_node_changes(cluster, last_state, tmp_path, command, expected):
    before = last_state["state"]
    rc, output = command(cluster, tmp_path)
    # Read at once, so that what a failing case changed is not charged again to the next one.
    last_state["state"] = after = cluster_state()
    # Ansible wraps long messages over lines.
    flat = " ".join(output.split())
    assert rc != 0, output[-3000:]
    for text in expected:
        assert text in flat, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert after == before
