"""Recovery from a lost node: torchfleet's restarts beside torchrun's elastic agent, in one run.

For each way a node can go (its container killed, paused: a hung node, or cut off its network;
or the blip: paused for BLIP s, half the default tolerance, then resumed; or, for runs that heal,
killed with a spare ready (spare: node1 killed, node2 the spare), or paused past a 12-s tolerance
and resumed (grow)), and each trial, the
same training (examples/train.py, one worker per node, a checkpoint every epoch) is started on the
local cluster's three nodes and node2 is taken away once the first checkpoint is written:

(a) torchfleet: `torchfleet launch --detach --max-restarts 1 --min-nodes 2`; measured from the
    event: the supervisor naming node2 lost (its record's lost_nodes), and the first step of the
    next attempt (rank 0's "training ..." line, printed just before its first step);
(b) torchrun's elastic agent with its defaults, one torchrun per node started over ssh (Open MPI
    cannot keep a job alive through a lost daemon): `--nnodes 2:3 --max-restarts 2
    --rdzv-backend c10d`, the rendezvous on node0; measured: the first step of the restarted
    workers (rank 0's "training ..." line of restart 1).

Both: the epochs done twice (the epochs rank 0 had finished at the event, less the epoch the next
attempt resumed from), and the processes left: for (a) on any node once node2 is back (its stale
ranks fenced) and the run stopped; for (b) what node2 still runs 5 s after it is back. The blip
is measured otherwise: the restarts it caused, the epochs redone, and whether the run still
trains with its whole world (two more epochs of rank 0 within 60 s of the resume). Prints a
table and writes bench/results/recovery.json; the headline is the ratio of (a)'s
time to resume to (b)'s.

The spare is measured as the kill (detect, train again, at what world size); the growth from the
first checkpoint rank 0 writes after the supervisor found node2 back and checked, to the grown
attempt's first step, with the epochs redone by growing (none expected). torchrun's elastic agent
has no spares and takes a node back only by restarting at once: it is measured for the others.

    python bench/recovery.py -i inventory/local.yml --trials 5 [--elastic-trials 2] [--ways kill,pause,cut,blip,spare,grow] [--out FILE]

With --torchft, its own table (bench/results/recovery_torchft.json): `--fault-tolerance torchft`
(examples/train_ft.py) with node2 killed and started 25 s later, paused 45 s, its network
dropped 45 s (iptables in its namespace, as root) or rebooted, beside the restart mode (a) for
kill and pause: the survivors' longest step gap from the event (their stall; restart mode's is its
resume_s, as no survivor trains before the next attempt does), the steps redone, and the time
from node2 back to its group's first step (heal_s), at what step against the others'.

    python bench/recovery.py -i inventory/local.yml --torchft --trials 1 [--ways kill,pause,drop,reboot]

Needs the local cluster (`torchfleet cluster up`, then setup.yml), run from the checkout's root.
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml

from benchlib import REPO, commit  # bench/ is the script's directory, first on sys.path
from torchfleet import devcluster

RUNS = "/home/torchfleet/torchfleet/runs"
ENV = "/opt/torchfleet/envs/torchfleet/bin"
SCRIPT = "/home/torchfleet/torchfleet/scripts/train.py"  # where torchfleet launch puts it
# Long enough to outlive any recovery; each run is stopped once its figures are taken.
TRAIN = ["--use-syn", "--no-wandb", "--epochs", "200", "--sleep", "0.1"]
LIMIT = 240  # seconds: a bound on every wait, never expected to be reached
LEFT = r"_on_node\.(supervisor|guardian)|train\.py|torchrun|orted|mpirun"
BLIP = 15  # seconds the blip pauses node2: half of heartbeat_timeout's default (30 s)


def docker(*args, check=False):
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


def wait_for(condition, what, limit=LIMIT, every=0.2, required=True):
    """The condition's first true value; past `limit`, the benchmark ends, or (not `required`)
    None: a recovery that does not come is a result too."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    if not required:
        return None
    sys.exit(f"not within {limit} s: {what}")


class Cluster:
    def __init__(self, inventory):
        data = yaml.safe_load(Path(inventory).read_text())
        hosts = data["all"]["children"]["cluster"]["hosts"]
        self.inventory = inventory
        self.nodes = list(hosts)
        self.address = {name: hosts[name]["ansible_host"] for name in self.nodes}
        self.name = self.nodes[0].split("-")[1]  # tf-NAME-node0
        self.network = f"tf-{self.name}"

    def sh(self, node, command, user="torchfleet"):
        return docker("exec", "-u", user, node, "sh", "-c", command)

    def take_away(self, way, node):
        if way in ("kill", "spare"):  # the spare's way: a node killed, a spare ready
            docker("kill", node, check=True)
        elif way in ("pause", "blip"):
            docker("pause", node, check=True)
        else:
            docker("network", "disconnect", self.network, node, check=True)

    def put_back(self, node):
        """As `cluster up` left it (devcluster.restore_node), reachable over ssh from the head."""
        devcluster.restore_node(self.name, int(node.rsplit("node", 1)[1]))
        wait_for(lambda: self.sh(self.nodes[0], f"ssh -o BatchMode=yes {self.address[node]} true").returncode == 0,
                 f"{node} reachable again")

    def running(self, node, pattern=LEFT):
        """The training account's processes on `node` matching `pattern` (pgrep itself, never a
        shell whose command line holds the pattern)."""
        return docker("exec", node, "pgrep", "-u", "torchfleet", "-f", pattern).stdout.split()

    def left(self):
        return sum(len(self.running(node)) for node in self.nodes)

    def torchfleet(self, *args):
        return subprocess.run([sys.executable, "-m", "torchfleet", args[0], "-i", self.inventory, *args[1:]],
                              cwd=REPO, capture_output=True, text=True, check=False)


def epochs_done(text):
    return len(re.findall(r"^epoch \d+/", text, re.M))


def resumed_from(text):
    found = re.findall(r"resumed from \S+ at epoch (\d+)", text)
    return int(found[-1]) if found else 0


def blip_goes_on(rank0_output) -> bool:
    """Whether rank 0 finishes two more epochs within 60 s of the blip's end."""
    after = epochs_done(rank0_output())
    return bool(wait_for(lambda: epochs_done(rank0_output()) >= after + 2, "two more epochs", 60, required=False))


def rank0_log(run_id, attempt=0):
    """Rank 0's stdout in an attempt: torchrun's file of worker 0 on node 0 (the head)."""
    return f"{RUNS}/{run_id}/workers{'.' + str(attempt) if attempt else ''}/node0/*/attempt_0/0/stdout.log"


def trial_grow(cluster, _way):
    """node2 paused past a 12-s tolerance (a shrink to world 2), resumed: from the first checkpoint
    rank 0 writes after the supervisor found node2 back and checked it (rejoin_after 3 s), to the
    grown attempt's first step at world 3; and the epochs redone by growing."""
    run_id = f"tf-bench-{uuid.uuid4().hex[:8]}"
    out = f"/tmp/{run_id}"
    head, lost = cluster.nodes[0], cluster.nodes[2]
    started = cluster.torchfleet("launch", "examples/train.py", "-e", "nproc_per_node=1", "-e", f"run_id={run_id}",
                                 "-e", "launch_heartbeat_timeout=12", "-e", "rejoin_after=3", "--detach",
                                 "--max-restarts", "1", "--min-nodes", "2", "--", *TRAIN, "--out-dir", out)
    if started.returncode != 0:
        sys.exit(f"torchfleet launch failed:\n{started.stderr[-3000:]}")
    wait_for(lambda: cluster.sh(head, f"test -f {out}/checkpoint.pt").returncode == 0, "the first checkpoint")
    docker("pause", lost, check=True)
    wait_for(lambda: "attempt 1 " in cluster.sh(head, f"cat {RUNS}/{run_id}/launcher.log").stdout, "the shrink")
    docker("unpause", lost, check=True)
    wait_for(lambda: "passes the launch's checks" in cluster.sh(head, f"cat {RUNS}/{run_id}/launcher.log").stdout,
             "node2 back and checked", every=0.1)
    marks = cluster.sh(head, f"cat {rank0_log(run_id, 1)}").stdout.count("TORCHFLEET_CHECKPOINT")
    wait_for(lambda: cluster.sh(head, f"cat {rank0_log(run_id, 1)}").stdout.count("TORCHFLEET_CHECKPOINT") > marks,
             "the next checkpoint", every=0.1)
    checkpoint = time.monotonic()
    wait_for(lambda: "training " in cluster.sh(head, f"cat {rank0_log(run_id, 2)} 2>/dev/null").stdout,
             "the grown attempt's first step", every=0.1)
    grow = time.monotonic() - checkpoint
    short = cluster.sh(head, f"cat {rank0_log(run_id, 1)}").stdout
    grown = cluster.sh(head, f"cat {rank0_log(run_id, 2)}").stdout
    done = [int(epoch) for epoch in re.findall(r"^epoch (\d+)/", short, re.M)]
    record = json.loads(cluster.sh(head, f"cat {RUNS}/{run_id}/state.json").stdout or "{}")
    cluster.torchfleet("stop", run_id)
    left = cluster.left()
    cluster.torchfleet("stop", "--all")
    return {"grow_s": round(grow, 1), "epochs_redone": (done[-1] if done else 0) - resumed_from(grown),
            "world_size": record.get("world_size"), "left": left}


def trial_torchfleet(cluster, way):
    run_id = f"tf-bench-{uuid.uuid4().hex[:8]}"
    out = f"/tmp/{run_id}"
    # With a spare (node2), node1 is the one taken away: the spare takes its place.
    head, lost = cluster.nodes[0], cluster.nodes[1 if way == "spare" else 2]
    keep = ["--spare-nodes", "1"] if way == "spare" else ["--min-nodes", "2"]
    started = cluster.torchfleet("launch", "examples/train.py", "-e", "nproc_per_node=1", "-e", f"run_id={run_id}",
                                 "--detach", "--max-restarts", "1", *keep, "--", *TRAIN, "--out-dir", out)
    if started.returncode != 0:
        sys.exit(f"torchfleet launch failed:\n{started.stderr[-3000:]}")
    rank0 = rank0_log(run_id)
    wait_for(lambda: cluster.sh(head, f"test -f {out}/checkpoint.pt").returncode == 0, "the first checkpoint")
    done = epochs_done(cluster.sh(head, f"cat {rank0}").stdout)
    cluster.take_away(way, lost)
    event = time.monotonic()

    def record():
        return json.loads(cluster.sh(head, f"cat {RUNS}/{run_id}/state.json").stdout or "{}")
    if way == "blip":
        time.sleep(BLIP)
        docker("unpause", lost, check=True)
        going = blip_goes_on(lambda: cluster.sh(head, f"cat {rank0}").stdout)
        found = record()
        again = cluster.sh(head, f"cat {rank0_log(run_id, 1)} 2>/dev/null").stdout
        cluster.torchfleet("stop", run_id)
        return {"restarts": found.get("restarts"), "state": found.get("state"), "world_size": found.get("world_size"),
                "going": going, "epochs_redone": done - resumed_from(again) if found.get("restarts") else 0,
                "left": cluster.left()}
    wait_for(lambda: record().get("lost_nodes") or record().get("restarts"), "node2 named lost")
    detect = time.monotonic() - event
    again = rank0_log(run_id, 1)
    began = wait_for(lambda: "training " in cluster.sh(head, f"cat {again} 2>/dev/null").stdout,
                     "the next attempt's first step", required=False)
    if not began:  # no next attempt within LIMIT: said, and the run stopped
        cluster.torchfleet("stop", run_id)
        cluster.put_back(lost)
        cluster.torchfleet("stop", "--all")
        return {"detect_s": round(detect, 1), "resume_s": None, "epochs_redone": None, "left": cluster.left(),
                "cause": (record().get("attempts") or [{}])[0].get("cause")}
    resume = time.monotonic() - event
    redone = done - resumed_from(cluster.sh(head, f"cat {again}").stdout)
    # node2 back while the next attempt runs: what it still ran of the run is ended (fenced).
    world = record().get("world_size")
    cluster.put_back(lost)
    wait_for(lambda: not cluster.running(lost), "node2 fenced", 60)
    cluster.torchfleet("stop", run_id)
    left = cluster.left()
    cluster.torchfleet("stop", "--all")
    return {"detect_s": round(detect, 1), "resume_s": round(resume, 1), "epochs_redone": redone,
            "left": left, "world_size": world, "cause": (record().get("attempts") or [{}])[0].get("cause")}


FT_STEPS = ["--steps", "100000", "--sleep", "0.05"]  # trains until stopped; each trial stops it
FT_AWAY = {"kill": 25, "pause": 45, "drop": 45, "reboot": 0}  # seconds node2 stays away
FT_STEP = re.compile(r"TORCHFLEET_STEP (\d+) .*t=([\d.]+)")


def ft_marks(cluster, node, index, run_id):
    """(time, step) of every TORCHFLEET_STEP line of the node's replica group, each start of it."""
    text = cluster.sh(node, f"cat {RUNS}/{run_id}/workers/node{index}/*/attempt_*/*/stdout.log 2>/dev/null").stdout
    return sorted((float(m.group(2)), int(m.group(1))) for m in FT_STEP.finditer(text))


def trial_torchft(cluster, way):
    """--fault-tolerance torchft (examples/train_ft.py, a replica group a node): node2 killed and
    started again 25 s later, paused 45 s, its network dropped 45 s (iptables in its namespace),
    or rebooted (docker restart). Measured: the survivors' longest step gap from the event on
    (their stall), the steps redone (a survivor's step going back: none expected), the time from
    node2 back to its group's first step after it (heal_s) and at what step against the others'."""
    run_id = f"tf-bench-{uuid.uuid4().hex[:8]}"
    head, lost = cluster.nodes[0], cluster.nodes[2]
    started = cluster.torchfleet("launch", "examples/train_ft.py", "-e", "nproc_per_node=1", "-e", f"run_id={run_id}",
                                 "--detach", "--fault-tolerance", "torchft", "--", *FT_STEPS)
    if started.returncode != 0:
        sys.exit(f"torchfleet launch failed:\n{started.stderr[-3000:]}")
    wait_for(lambda: any(step >= 50 for _t, step in ft_marks(cluster, lost, 2, run_id)), "node2's group at step 50")
    event = time.time()
    if way == "drop":
        pid = docker("inspect", "-f", "{{.State.Pid}}", lost).stdout.strip()
        for chain in ("INPUT", "OUTPUT"):
            subprocess.run(["nsenter", "-t", pid, "-n", "iptables", "-I", chain, "-j", "DROP"], check=True)
    elif way == "reboot":
        docker("restart", "--time", "0", lost, check=True)
    else:
        cluster.take_away(way, lost)
    time.sleep(FT_AWAY[way])
    if way == "drop":
        for chain in ("INPUT", "OUTPUT"):
            subprocess.run(["nsenter", "-t", pid, "-n", "iptables", "-D", chain, "-j", "DROP"], check=True)
    elif way == "pause":
        docker("unpause", lost, check=True)
    elif way == "kill":
        cluster.put_back(lost)
    back = time.time()
    healed = wait_for(lambda: next(((t, step) for t, step in ft_marks(cluster, lost, 2, run_id) if t > back), None),
                      "node2's group training again", required=False)
    time.sleep(10)  # the survivors' steps after it
    survivor = ft_marks(cluster, head, 0, run_id)
    record = json.loads(cluster.sh(head, f"cat {RUNS}/{run_id}/state.json").stdout or "{}")
    cluster.torchfleet("stop", run_id)
    left = cluster.left()
    after = [(a, b) for a, b in zip(survivor, survivor[1:]) if b[0] >= event]
    others = max((step for t, step in survivor if healed and t <= healed[0]), default=None)
    return {"stall_s": round(max(b[0] - a[0] for a, b in after), 2) if after else None,
            "steps_redone": sum(max(0, a[1] - b[1] + 1) for a, b in after),
            "heal_s": round(healed[0] - back, 1) if healed else None,
            "healed_at": healed[1] if healed else None, "others_at": others,
            "starts": (record.get("groups") or {}).get(lost, {}).get("starts"), "left": left}


def trial_elastic(cluster, way):
    """torchrun's elastic agent on every node, started over ssh (docker exec here) as a user would."""
    tag = uuid.uuid4().hex[:8]
    head, lost = cluster.nodes[0], cluster.nodes[2]
    out, log = f"/tmp/elastic-{tag}", f"/tmp/elastic-{tag}.log"
    endpoint = f"{cluster.address[head]}:29400"
    for node in cluster.nodes:
        command = (f"cd /tmp && exec {ENV}/torchrun --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d "
                   f"--rdzv-endpoint {endpoint} --rdzv-id elastic-{tag} --max-restarts 2 "
                   f"{SCRIPT} {' '.join(TRAIN)} --out-dir {out} > {log} 2>&1")
        docker("exec", "-d", "-u", "torchfleet", node, "sh", "-c", command, check=True)
    wait_for(lambda: cluster.sh(head, f"test -f {out}/checkpoint.pt").returncode == 0, "the first checkpoint")
    done = epochs_done(cluster.sh(head, f"cat {log}").stdout)
    cluster.take_away(way, lost)
    event = time.monotonic()
    if way == "blip":
        time.sleep(BLIP)
        docker("unpause", lost, check=True)
        going = blip_goes_on(lambda: cluster.sh(head, f"cat {log}").stdout)
        text = cluster.sh(head, f"cat {log}").stdout
        restarts = text.count("training ") - 1
        for node in cluster.nodes:
            cluster.sh(node, "pkill -KILL -f 'torchrun|train.py' || true")
        return {"restarts": restarts, "going": going,
                "epochs_redone": done - resumed_from(text) if restarts else 0, "left": 0}

    def restarted():
        text = cluster.sh(head, f"cat {log}").stdout
        return text.count("training ") >= 2 and text
    text = wait_for(restarted, "the elastic agent's restarted workers' first step", required=False)
    resume = time.monotonic() - event if text else None  # no restart within LIMIT
    redone = done - resumed_from(text) if text else None
    # node2 back: nothing ends what it still runs (its agent may even rejoin); counted, then ended.
    cluster.put_back(lost)
    time.sleep(5)
    stale = len(cluster.running(lost, "torchrun|train.py"))
    for node in cluster.nodes:
        cluster.sh(node, "pkill -KILL -f 'torchrun|train.py' || true")
    return {"detect_s": None, "resume_s": round(resume, 1) if resume else None, "epochs_redone": redone,
            "left": stale}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-i", "--inventory", default="inventory/local.yml")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--ways", default=parser_default())
    parser.add_argument("--elastic-trials", type=int,
                        help="trials of torchrun's elastic agent per way (default: --trials); one that never "
                             "restarts takes the whole 240-s bound")
    parser.add_argument("--out", help="the results' file name under bench/results (default: recovery.json)")
    parser.add_argument("--torchft", action="store_true",
                        help="--fault-tolerance torchft beside today's restart (ways kill, pause, drop, reboot; the "
                             "cluster set up with -e fault_tolerance=torchft): its own table")
    args = parser.parse_args()
    if args.torchft:
        return torchft_table(Cluster(args.inventory), args)
    elastic_trials = args.trials if args.elastic_trials is None else args.elastic_trials
    cluster = Cluster(args.inventory)
    if cluster.torchfleet("stop", "--all").returncode != 0:
        sys.exit("torchfleet stop --all failed: is the cluster up and set up?")
    table = {}
    for way in args.ways.split(","):
        for trial in range(args.trials):
            # Side by side, alternating, so that the machine's load falls on both alike.
            mine = trial_grow if way == "grow" else trial_torchfleet
            for system, run in (("torchfleet", mine), ("elastic", trial_elastic)):
                # torchrun's agent has no spares, and does not take a node back at a checkpoint.
                if system == "elastic" and (trial >= elastic_trials or way in ("spare", "grow")):
                    continue
                result = run(cluster, way)
                table.setdefault(way, {}).setdefault(system, []).append(result)
                print(f"{way:<6} {system:<10} trial {trial + 1}: {result}", flush=True)
    summary = {}
    for way, systems in table.items():
        row = {}
        for system, trials in systems.items():
            if way == "grow":
                row[system] = {"grow_s": statistics.median(t["grow_s"] for t in trials),
                               "grow_s_range": [min(t["grow_s"] for t in trials), max(t["grow_s"] for t in trials)],
                               "epochs_redone": max(t["epochs_redone"] for t in trials),
                               "world_size": [t["world_size"] for t in trials], "left": max(t["left"] for t in trials)}
                continue
            if way == "blip":
                row[system] = {"restarts": max(t["restarts"] or 0 for t in trials),
                               "epochs_redone": max(t["epochs_redone"] or 0 for t in trials),
                               "going": all(t["going"] for t in trials), "left": max(t["left"] for t in trials)}
                continue
            # A figure some trials lack (no restart within LIMIT) has no median: None, and the
            # trials say which.
            row[system] = {key: statistics.median(t[key] for t in trials)
                           if all(t[key] is not None for t in trials) else None
                           for key in ("detect_s", "resume_s", "epochs_redone")}
            row[system]["left"] = max(t["left"] for t in trials)
        summary[way] = row
        if way in ("blip", "grow"):
            print(f"{way:<6} torchfleet: {row['torchfleet']}; elastic: {row.get('elastic')}")
            continue
        mine, theirs = row["torchfleet"]["resume_s"], (row.get("elastic") or {}).get("resume_s")
        row["resume_ratio"] = round(mine / theirs, 2) if mine and theirs else None
        print(f"{way:<6} torchfleet: detect {row['torchfleet']['detect_s']} s, resume {row['torchfleet']['resume_s']} s, "
              f"redone {row['torchfleet']['epochs_redone']} epochs, left {row['torchfleet']['left']}; elastic: "
              f"{row.get('elastic')}; ratio {row['resume_ratio']}")
    results = Path(REPO / "bench" / "results" / (args.out or "recovery.json"))
    results.write_text(json.dumps({"commit": commit(), "trials": args.trials, "elastic_trials": elastic_trials,
                                   "summary": summary,
                                   "runs": table}, indent=1) + "\n")
    print(f"written to {results}")


def torchft_table(cluster, args):
    """The survivors' stall under torchft beside the restart mode's time to train again (resume_s:
    the survivors train again when the next attempt does), for each way, side by side."""
    ways = [way for way in args.ways.split(",") if way in FT_AWAY] if args.ways != parser_default() else list(FT_AWAY)
    table: dict = {}
    for way in ways:
        for trial in range(args.trials):
            for system, run in (("torchft", trial_torchft), ("restart", trial_torchfleet)):
                if system == "restart" and way not in ("kill", "pause"):
                    continue  # its cut is a network disconnect (bench's other table); reboot as kill
                result = run(cluster, way)
                table.setdefault(way, {}).setdefault(system, []).append(result)
                print(f"{way:<6} {system:<8} trial {trial + 1}: {result}", flush=True)
    summary = {way: {system: {key: statistics.median(t[key] for t in trials) if all(
        isinstance(t.get(key), (int, float)) for t in trials) else None for key in trials[0] if key != "cause"}
        for system, trials in systems.items()} for way, systems in table.items()}
    for way, row in summary.items():
        ft, restart = row["torchft"], row.get("restart") or {}
        if ft.get("stall_s") and restart.get("resume_s"):
            row["stall_ratio"] = round(ft["stall_s"] / restart["resume_s"], 3)
        print(f"{way:<6} torchft: {ft}; restart: {restart or 'not measured'}; ratio {row.get('stall_ratio')}")
    results = Path(REPO / "bench" / "results" / (args.out or "recovery_torchft.json"))
    results.write_text(json.dumps({"commit": commit(), "trials": args.trials, "summary": summary, "runs": table},
                                  indent=1) + "\n")
    print(f"written to {results}")


def parser_default() -> str:
    return "kill,pause,cut,blip,spare,grow"


if __name__ == "__main__":
    main()
