"""A run's output as its script wrote it, on three real containers through the `torchfleet`
command: a tqdm bar drawn live in place on a terminal and kept whole in the log, and a line of
64 MiB passed on with the follower's memory bounded.

The cluster is the session's shared one (three nodes, set up once, tqdm in its environment).
"""

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time

import pytest

from ready_cluster import NODES, REPO, run
from test_run_lifecycle import LIMIT, RUNS, torchfleet, torchfleet_argv
# An autouse fixture: every test here leaves no run alive on any node.
from test_run_lifecycle import nothing_left  # noqa: F401 pylint: disable=unused-import

pytestmark = pytest.mark.cluster
HEAD = NODES[0]

# Every rank draws a bar on stderr (tqdm's default) for about 8 s, then prints a line.
BAR = """
import sys, time
from tqdm import tqdm
for step in tqdm(range(32), desc="steps", ncols=70, mininterval=0):
    time.sleep(0.25)
print("BAR DONE", flush=True)
"""

HUGE = 64 << 20
# Rank 0 writes one line of 64 MiB with no newline, in writes of 1 MiB, then ends.
ONE_HUGE_LINE = f"""
import os, sys
if os.environ["RANK"] == "0":
    for _ in range({HUGE >> 20}):
        sys.stdout.write("y" * (1 << 20))
    sys.stdout.flush()
"""


def test_a_tqdm_bar_is_drawn_live_in_place_on_a_terminal_and_kept_in_the_log(cluster, tmp_path):
    script = tmp_path / "bar.py"
    script.write_text(BAR)
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))  # 100 columns
    launch = subprocess.Popen(torchfleet_argv(cluster, "launch", str(script)), cwd=REPO,
                              env=dict(cluster.env, TERM="xterm"), stdin=subprocess.DEVNULL, stdout=terminal,
                              stderr=subprocess.PIPE, start_new_session=True)
    os.close(terminal)
    screen, deadline = b"", time.monotonic() + LIMIT
    try:
        while time.monotonic() < deadline:
            if select.select([controller], [], [], 1)[0]:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # the terminal's other end closed: the command ended
                    break
                if not chunk:
                    break
                screen += chunk
        assert launch.wait(timeout=60) == 0, launch.stderr.read()[-3000:]
    finally:
        if launch.poll() is None:
            launch.kill()
        os.close(controller)
    text = screen.decode("utf-8", "replace")
    assert "BAR DONE" in text, text[-3000:]
    # While the bar ran (before the script's last line), it was drawn again and again in place:
    # its changing counts, each redraw on the bar's own row (the cursor taken back up to it).
    while_running = text[:text.index("BAR DONE")]
    counts = {int(n) for n in re.findall(r"\b(\d+)/32\b", while_running)}
    assert len(counts - {32}) >= 5, while_running[-2000:]
    assert while_running.count("\x1b[1A\r\x1b[J") >= 5, while_running[-2000:]
    run_id = re.search(r"torchfleet: run (\S+) started on", launch.stderr.read().decode()).group(1)
    # The log of the ended run (a pipe): each redraw a line of its own, the bar's last state
    # there, and no tag of torchrun's or Open MPI's inside any line.
    logs = torchfleet(cluster, "logs", run_id)
    assert logs.returncode == 0, logs.stderr[-3000:]
    bars = [line for line in logs.stdout.splitlines() if "/32 [" in line]
    assert len(bars) >= 10 and "32/32" in bars[-1] and bars[-1].startswith("steps: 100%"), bars[-5:]
    assert not any(re.search(r".\[(default\d+|\d+,\d+)\]", line) for line in logs.stdout.splitlines()), logs.stdout
    every = torchfleet(cluster, "logs", run_id, "--all-ranks")
    for rank in range(3):
        assert f"[rank {rank} {NODES[rank]}] steps: 100%" in every.stdout, every.stdout[-3000:]


def _peak_memory_of_the_follower(run_id):
    """The head's follower (`follower.py print`, as the torchfleet command runs it over ssh) run
    whole on the head, from the run's head package: its peak resident memory in KiB, and the bytes
    it printed."""
    plan = json.loads(run(["docker", "exec", HEAD, "cat", f"{RUNS}/{run_id}/run.json"], timeout=60).stdout)
    measure = ("import os, resource, subprocess, sys; "
               "out = subprocess.run(['python3', '-S', '-m', '_on_node.follower', 'print', sys.argv[2]], "
               "cwd=os.path.dirname(sys.argv[1]), stdout=subprocess.PIPE, check=True).stdout; "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, len(out))")
    found = run(["docker", "exec", "-u", "torchfleet", HEAD, "python3", "-c", measure, plan["package"],
                 f"{RUNS}/{run_id}"], timeout=LIMIT)
    assert found.returncode == 0, found.stderr
    peak, printed = map(int, found.stdout.split())
    return peak, printed


def test_a_line_of_64_mib_arrives_whole_in_pieces_with_the_followers_memory_bounded(cluster, tmp_path):
    script = tmp_path / "huge.py"
    script.write_text(ONE_HUGE_LINE)
    followed = torchfleet(cluster, "launch", str(script), "-e", "nproc_per_node=1")
    assert followed.returncode == 0, followed.stderr[-3000:]
    pieces = [line for line in followed.stdout.splitlines() if line.startswith("y")]
    # Passed on as it came, in pieces of LINE_CAP (4 MiB), each a line of its own; nothing lost.
    assert sum(map(len, pieces)) == HUGE and len(pieces) == HUGE // (4 << 20), [len(p) for p in pieces]
    run_id = re.search(r"torchfleet: run (\S+) started on", followed.stderr).group(1)
    peak, printed = _peak_memory_of_the_follower(run_id)
    assert printed > HUGE
    # Its bound: the cap of an open line (4 MiB) and a chunk read (1 MiB), held a few times over
    # while a piece is cut and written, beside the interpreter: far below the line's 64 MiB.
    assert peak < 40 * 1024, peak


# Two workers a node: rank 2 (node1's first) fails with words of its own; the others wait to be ended.
FAILS_ON_NODE1 = """
import os, sys, time
rank = int(os.environ["RANK"])
print(f"RANK {rank} says hello", flush=True)
if rank == 2:
    time.sleep(2)
    print("rank 2 fails on purpose", file=sys.stderr, flush=True)
    sys.exit(3)
time.sleep(120)
"""


def test_a_run_on_shared_storage_is_found_without_its_log_dir_and_each_nodes_logs_are_its_own(cluster, tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(FAILS_ON_NODE1)
    shared = f"/shared/tfruns-{os.getpid()}"  # every node mounts /shared: one directory for all
    started = torchfleet(cluster, "launch", str(script), "-e", "nproc_per_node=2", "-e", f"log_dir={shared}",
                         "--detach")
    assert started.returncode == 0, started.stderr[-3000:]
    run_id = started.stdout.split()[1]
    # wait, runs and logs find it with no -e log_dir.
    waited = torchfleet(cluster, "wait", run_id)
    assert waited.returncode == 3, waited.stderr[-3000:]
    listed = torchfleet(cluster, "runs", "--json")
    found = {item["run_id"]: item for item in json.loads(listed.stdout)}[run_id]
    assert found["log_dir"] == f"{shared}/{run_id}" and found["failed_host"] == NODES[1], found
    # The failure's tail is node1's rank 2's own text, read from node1's own directory.
    assert found["failed_rank"] == 2 and f"{shared}/{run_id}/workers/node1/" in found["failed_log"], found
    assert "rank 2 fails on purpose" in waited.stderr, waited.stderr[-3000:]
    layout = run(["docker", "exec", HEAD, "ls", f"{shared}/{run_id}/workers"], timeout=60).stdout.split()
    assert layout == ["node0", "node1", "node2"], layout
    for index, node in enumerate(NODES):
        logs = torchfleet(cluster, "logs", run_id, "--node", node)
        assert logs.returncode == 0, logs.stderr[-3000:]
        hellos = [line for line in logs.stdout.splitlines() if "says hello" in line]
        ranks = (2 * index, 2 * index + 1)
        assert sorted(hellos) == [f"[rank {rank} {node}] RANK {rank} says hello" for rank in ranks], logs.stdout
