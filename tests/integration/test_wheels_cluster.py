"""The wheelhouse on three real containers: the controller sends it once, the nodes spread it among
themselves, every file is checked against the lock's sha256, and a launch refuses a node whose
environment drifted. Every test leaves the cluster as setup left it.
"""

import hashlib
import re
from pathlib import Path

import pytest
import yaml

from ready_cluster import NAME, NODES, recap, run
from torchfleet import devcluster

ENV_PYTHON = "/opt/torchfleet/envs/torchfleet/bin/python"
NODE_ROOT = "/opt/torchfleet/wheelhouse"
SPREAD_PORT = 29610
pytestmark = pytest.mark.cluster


def node_sh(node, script):
    result = run(["docker", "exec", node, "sh", "-c", script], timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def node_wheelhouse(node):
    """The node's wheelhouse directory of the current spec (setup removes the others)."""
    found = node_sh(node, f"ls -d {NODE_ROOT}/*/").split()
    assert len(found) == 1, found
    return found[0].rstrip("/")


def controller_wheelhouse(node):
    return Path.home() / ".cache" / "torchfleet" / "wheelhouse" / Path(node_wheelhouse(node)).name


def lock(directory):
    """{file name: sha256} of every wheel of the controller's lock, and the lock itself."""
    text = (directory / "requirements.lock").read_text()
    pins = dict(re.findall(r"^(\S+==\S+) --hash=sha256:([0-9a-f]{64})$", text, re.M))
    files = {}
    for wheel in directory.glob("*.whl"):
        name, version = wheel.name.split("-")[:2]
        files[wheel.name] = pins[f"{re.sub(r'[-_.]+', '-', name).lower()}=={version}"]
    assert len(files) == len(pins) == len(text.split("\n")) - 1
    files["requirements.lock"] = hashlib.sha256(text.encode()).hexdigest()
    return files


def node_hashes(node):
    """{file: sha256} of the node's wheelhouse (dotfiles, setup's own records, left out)."""
    out = node_sh(node, f"cd {node_wheelhouse(node)} && sha256sum *")
    return {name: digest for digest, name in (line.split() for line in out.splitlines())}


def installed(node):
    out = node_sh(node, f"{ENV_PYTHON} -c \"import importlib.metadata as m; "
                        f"print('\\n'.join(d.metadata['Name'] + '==' + d.version for d in m.distributions()))\"")
    return {re.sub(r"[-_.]+", "-", line.split("==")[0]).lower() + "==" + line.split("==")[1]
            for line in out.split()}


def test_the_controller_sends_the_wheels_once_and_every_node_holds_exactly_the_lock(cluster):
    wanted = lock(controller_wheelhouse(NODES[0]))
    size = sum((controller_wheelhouse(NODES[0]) / name).stat().st_size for name in wanted)
    # Three nodes from scratch: the wheels crossed from the controller once (before the spread,
    # three times), with ssh and Ansible's modules on top.
    assert size < cluster.first_setup_sent < 1.3 * size, (cluster.first_setup_sent, size)
    pins = {re.sub(r"[-_.]+", "-", f.split("-")[0]).lower() + "==" + f.split("-")[1] for f in wanted if f.endswith(".whl")}
    for node in NODES:
        assert node_hashes(node) == wanted, node
        assert installed(node) - {p for p in installed(node) if p.startswith("pip==")} == pins, node


def test_nothing_of_the_spread_is_left_running_or_listening(cluster):
    for node in NODES:
        tables = node_sh(node, "cat /proc/net/tcp /proc/net/tcp6")
        listening = [line.split()[1] for line in tables.splitlines()[1:]
                     if len(line.split()) > 3 and line.split()[3] == "0A"]
        assert not [a for a in listening if a.endswith(f":{SPREAD_PORT:04X}")], (node, listening)
        processes = node_sh(node, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
        assert "wheel_server" not in processes and "wheel_files" not in processes, node
        leftovers = node_sh(node, f"ls -a {node_wheelhouse(node)}").split()
        assert not [f for f in leftovers if f.endswith(".partial") or f in (".torchfleet-serving", ".torchfleet-fetching")]


def test_a_node_that_cannot_get_the_wheels_is_named_and_the_others_complete(cluster):
    wanted = lock(controller_wheelhouse(NODES[0]))
    filelock = next(name for name in wanted if name.startswith("filelock-"))
    for node in NODES[1:]:
        node_sh(node, f"rm {node_wheelhouse(node)}/{filelock}")
    # The last node cannot reach any wheel server: a routing rule of its own makes its connections
    # to the spread's port unreachable (ssh, and every other port, pass). Each fetch writes a
    # temporary file of its own name, so the file it writes into can no longer be taken ahead.
    # TCP by its number: the nodes have no /etc/protocols (netbase) for ip to read "tcp" from.
    node_sh(NODES[2], f"ip rule add ipproto 6 dport {SPREAD_PORT} unreachable pref 100")
    try:
        rc, output = cluster.setup()
        flat = " ".join(output.split())
        assert rc == 2, output[-3000:]
        counts = recap(output)
        assert counts[NODES[2]]["failed"] == 1
        assert counts[NODES[0]]["failed"] == 0 and counts[NODES[1]]["failed"] == 0
        assert re.search(rf"fatal: \[{NODES[2]}\]: FAILED!.*{re.escape(filelock)} could not be fetched: "
                         rf"http://\S+:{SPREAD_PORT}/: \[Errno 101\] Network is unreachable", flat), output[-3000:]
        assert node_hashes(NODES[1])[filelock] == wanted[filelock]
    finally:
        node_sh(NODES[2], "ip rule del pref 100")
    rc, output = cluster.setup()
    assert rc == 0, output[-3000:]
    assert node_hashes(NODES[2])[filelock] == wanted[filelock]


def test_a_package_removed_by_hand_stops_the_launch_and_a_wheel_altered_is_fetched_again(cluster):
    # Two ways a node drifts from setup, on two nodes, put right by one run of setup.
    # node1: a package removed from the environment by hand; the launch refuses before it starts.
    node_sh(NODES[1], f"{ENV_PYTHON} -m pip uninstall --yes --quiet sympy")
    # node2: four bytes of a wheel changed in place (the size stays, the bytes do not).
    wanted = lock(controller_wheelhouse(NODES[0]))
    torch = next(name for name in wanted if name.startswith("torch-"))
    path = f"{node_wheelhouse(NODES[2])}/{torch}"
    node_sh(NODES[2], f"printf XXXX | dd of={path} bs=1 seek=4096 conv=notrunc 2>/dev/null")
    assert node_hashes(NODES[2])[torch] != wanted[torch]
    try:
        rc, output = cluster.launch("-e", "script=examples/train.py", "-e", "nproc_per_node=1")
        flat = " ".join(output.split())
        assert rc != 0
        assert (f"refusing to launch: the Python environment {ENV_PYTHON} is no longer what setup "
                f"installed, on {NODES[1]}: sympy is missing (spec: ") in flat, output[-3000:]
        assert "Run setup again (ansible-playbook setup.yml -i INVENTORY) to put it back" in flat
        assert "TORCHFLEET_RESULT" not in output
    finally:
        with devcluster.ControllerTraffic(NAME) as traffic:
            rc, output = cluster.setup()
            sent = traffic.sent()
    assert rc == 0, output[-3000:]
    flat = " ".join(output.split())
    assert f"{NODES[1]}: sympy is missing" in flat
    assert any(p.startswith("sympy==") for p in installed(NODES[1]))
    assert f"{NODES[2]}: {torch}: sha256 " in flat and "(altered or damaged on this node); fetched again" in flat
    assert node_hashes(NODES[2])[torch] == wanted[torch]
    # The wheel came from the seed, over the cluster network: not from the controller again.
    torch_size = (controller_wheelhouse(NODES[0]) / torch).stat().st_size
    assert sent < torch_size / 4, (sent, torch_size)
    counts = recap(output)
    assert counts[NODES[1]]["changed"] == 1 and counts[NODES[2]]["changed"] == 1
    assert counts[NODES[0]]["changed"] == 0


def two_fetches_playbook(seed, node, served, target, wheel, port):
    """A wheel server on `seed` that says "ask again" until the test puts the wheel in place, two
    wheel_files jobs on `node` started one after the other into one directory, both waiting on
    it, then the wheel let out: both fetch it in full at once, as two setups on one node would."""
    source = f"http://{{{{ hostvars['{seed}'].ansible_facts.default_ipv4.address }}}}:{port}/"
    return [
        {"name": "Serve the wheel, once it is there", "hosts": seed, "gather_facts": True, "tasks": [
            {"name": "Serve", "torchfleet.cluster.wheel_server": {
                "path": served, "files": [wheel["file"]], "address": "{{ ansible_facts.default_ipv4.address }}",
                "port": port, "pending": True, "timeout": 600},
             "async": 600, "poll": 0, "register": "server", "changed_when": False}]},
        {"name": "Fetch it twice at once into one directory", "hosts": node, "gather_facts": False, "tasks": [
            {"name": "Fetch", "torchfleet.cluster.wheel_files": {
                "path": target, "files": [wheel], "sources": [source], "timeout": 600},
             "async": 600, "poll": 0, "loop": ["first", "second"], "register": "fetches", "changed_when": False},
            {"name": "Let both fetches reach the server and wait on it", "ansible.builtin.pause": {"seconds": 5}}]},
        {"name": "Put the wheel in place", "hosts": seed, "gather_facts": False, "tasks": [
            {"name": "Move it in", "ansible.builtin.command": f"mv {served}/incoming {served}/{wheel['file']}"}]},
        {"name": "Both fetches end", "hosts": node, "gather_facts": False, "tasks": [
            {"name": "Wait", "ansible.builtin.async_status": {"jid": "{{ item.ansible_job_id }}"},
             "loop": "{{ fetches.results }}", "register": "done", "until": "done.finished",
             "retries": 600, "delay": 1},
            {"name": "Each fetched the wheel in full, the bytes hashed as they were written",
             "ansible.builtin.assert": {"that": [
                 f"item.fetched_bytes | dict2items | map(attribute='value') | list == [{wheel['size']}]",
                 f"item.missing == ['{wheel['file']}']"]},
             "loop": "{{ done.results }}"},
            {"name": "Remove the fetches' job records", "ansible.builtin.async_status": {
                "jid": "{{ item.ansible_job_id }}", "mode": "cleanup"}, "loop": "{{ fetches.results }}"}]},
        {"name": "End the server", "hosts": seed, "gather_facts": False, "tasks": [
            {"name": "End it", "torchfleet.cluster.wheel_server": {"path": served, "state": "stopped"},
             "changed_when": False},
            {"name": "Remove its job record", "ansible.builtin.async_status": {
                "jid": "{{ server.ansible_job_id }}", "mode": "cleanup"}}]},
    ]


def test_two_fetches_at_once_on_one_node_end_with_the_wheel_verified_and_nothing_left(cluster, tmp_path):
    seed, node = NODES[0], NODES[2]
    served, target, port = "/tmp/torchfleet-two-fetches-served", "/tmp/torchfleet-two-fetches", SPREAD_PORT + 1
    # A GiB: long enough a transfer that the second fetch starts while the first still writes.
    out = node_sh(seed, f"rm -rf {served} && mkdir {served} && head -c {1 << 30} /dev/urandom > {served}/incoming "
                        f"&& sha256sum {served}/incoming")
    wheel = {"file": "big-1-py3-none-any.whl", "sha256": out.split()[0], "size": 1 << 30}
    playbook = tmp_path / "two-fetches.yml"
    playbook.write_text(yaml.safe_dump(two_fetches_playbook(seed, node, served, target, wheel, port), sort_keys=False))
    try:
        rc, output = cluster.playbook(str(playbook), timeout=900)
        assert rc == 0, output[-3000:]
        assert node_sh(node, f"sha256sum {target}/{wheel['file']}").split()[0] == wheel["sha256"]
        left = node_sh(node, f"ls -A {target}").split()
        assert sorted(left) == sorted([wheel["file"], ".torchfleet-verified.json"]), left
        assert "big-1-py3-none-any.whl" in node_sh(node, f"cat {target}/.torchfleet-verified.json")
    finally:
        # Removing the served directory removes the server's marker too, which ends it.
        node_sh(seed, f"rm -rf {served}")
        node_sh(node, f"rm -rf {target}")
