"""Hang detection: from a rank's last progress to the hung attempt's end (its stacks taken) and to
training again, with hang_timeout 60 s beside the default (auto), on the same run, in one run.

tests/integration/stopping_rank.py on the local cluster's three nodes, one worker a node: rank 2
blocks at step 20 of the first attempt in a function of its own while the others wait for it in
an all_reduce; `torchfleet launch --detach --max-restarts 1 --hang-timeout T`. Measured on the
head's clock (the containers share the host's): the last progress (the record's hung.since), the
first attempt's end (its `ended`), and the restart's rank 0 marking its first step (its worker
file's first TORCHFLEET_STEP line, polled); then whether the stacks were kept and named the
function, and the run's end. The headline is the ratio of the default's time to detect to
60 s's.

    python bench/hang_detection.py -i inventory/local.yml [--timeouts 60,auto] [--out FILE]

Needs the local cluster (`torchfleet cluster up`, then setup.yml), run from the checkout's root.
The default waits at least 10 minutes (its floor): a trial of it takes 11.
"""

import argparse
import json
import re
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

from benchlib import REPO, commit  # bench/ is the script's directory, first on sys.path
from recovery import RUNS, Cluster, wait_for

SCRIPT = "tests/integration/stopping_rank.py"
ARGS = ["--steps", "60", "--sleep", "0.2", "--stop-rank", "2", "--stop-at", "20"]


def record(cluster, run_id):
    shown = cluster.sh(cluster.nodes[0], f"cat {RUNS}/{run_id}/state.json").stdout
    return json.loads(shown) if shown.strip() else {}


def seconds(iso):
    return datetime.fromisoformat(iso).timestamp()


def trial(cluster, timeout):
    run_id = f"tf-bhang-{uuid.uuid4().hex[:6]}"
    started = cluster.torchfleet("launch", SCRIPT, "-e", "nproc_per_node=1", "-e", f"run_id={run_id}",
                                 "--max-restarts", "1", "--hang-timeout", timeout, "--detach", "--", *ARGS)
    if started.returncode != 0:
        sys.exit(f"launch failed: {started.stderr[-2000:]}")
    ended = wait_for(lambda: (record(cluster, run_id).get("attempts") or [{}])[0].get("ended"),
                     "the hung attempt's end", limit=900 if timeout == "auto" else 240)
    stepping = f"grep -l TORCHFLEET_STEP {RUNS}/{run_id}/workers.1/node0/*/attempt_0/0/stdout.log"
    wait_for(lambda: cluster.sh(cluster.nodes[0], stepping).returncode == 0, "the restart's first step")
    again = time.time()

    def ended_run():
        found = record(cluster, run_id)
        return found if found.get("state") in ("succeeded", "failed", "hung") else None
    final = wait_for(ended_run, "the run's end")
    # The hung attempt's cause: "hung: no progress since ISO; stopped first: rank R on NODE (...)".
    cause = final["attempts"][0]["cause"]
    since = seconds(re.search(r"no progress since (\S+);", cause).group(1))
    stacks = cluster.torchfleet("logs", run_id, "--stacks").stdout
    return {"timeout": timeout, "detected_s": round(seconds(ended) - since, 1),
            "training_again_s": round(again - seconds(ended), 1), "state": final["state"],
            "stacks_name_the_function": "stuck_in_a_function_of_its_own" in stacks,
            "stopped_first": re.findall(r"stopped first: (rank \d+)", cause), "left": cluster.left()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("-i", "--inventory", default="inventory/local.yml")
    parser.add_argument("--timeouts", default="60,auto")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "hang_detection.json"))
    args = parser.parse_args()
    cluster = Cluster(args.inventory)
    results = [trial(cluster, timeout) for timeout in args.timeouts.split(",")]
    for found in results:
        print(f"hang_timeout {found['timeout']:>4}: the attempt ended "
              f"{found['detected_s']} s after the last progress, training again {found['training_again_s']} s "
              f"later; stacks name the function: {found['stacks_name_the_function']}; stopped first "
              f"{found['stopped_first']}; {found['state']}; {found['left']} processes left")
    by = {found["timeout"]: found for found in results}
    if "60" in by and "auto" in by:
        print(f"default / 60 s: {by['auto']['detected_s'] / by['60']['detected_s']:.2f}")
    Path(args.out).write_text(json.dumps({"commit": commit(), "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
