"""What launch.yml's mapping of short names (playbooks/tasks/typed_names.yml) costs a launch.

Two plays on the same hosts, run alternately in one run: (a) a play with one debug task, (b) the
same play after launch.yml's pre-task that maps the short names (with the short names a
`torchfleet launch` gives: script, script_args, run_id, detach). The hosts are this machine under
several names (ansible_connection=local): set_fact runs on the controller whatever the connection,
so what differs between (a) and (b) is the task itself. Prints and writes the medians and the
difference to bench/results/typed_names.json.

    python bench/typed_names.py --runs 15 --hosts 3
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchlib import REPO, commit, run_timed  # bench/ is the script's directory, first on sys.path

PLAY = """- name: One task on the cluster's hosts
  hosts: cluster
  gather_facts: false
  vars:
    torchfleet_names: {names}
  pre_tasks: {pre_tasks}
  tasks:
    - name: Say the script
      ansible.builtin.debug:
        msg: "{{{{ launch_script | default('') }}}}"
      run_once: true
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--hosts", type=int, default=3)
    args = parser.parse_args()
    names = {"script": ["launch_script"], "script_args": ["launch_script_args"], "run_id": ["launch_run_id"],
             "detach": ["launch_detach"], "cluster_user_name": ["launch_user"]}
    mapping = str(REPO / "playbooks" / "tasks" / "typed_names.yml")
    extra = ["-e", json.dumps({"script": "train.py", "script_args": ["--epochs", "1"], "run_id": "tf-x",
                               "detach": True})]
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        inventory = scratch / "hosts.yml"
        inventory.write_text("cluster:\n  hosts:\n" + "".join(
            f"    node{i}: {{ansible_connection: local}}\n" for i in range(args.hosts)))
        plays = {}
        for label, pre_tasks in (("a_without", "[]"), ("b_with_mapping",
                                 f"[{{name: Take the short names, ansible.builtin.import_tasks: {mapping}}}]")):
            plays[label] = scratch / f"{label}.yml"
            plays[label].write_text(PLAY.format(names=json.dumps(names), pre_tasks=pre_tasks))
        seconds = {label: [] for label in plays}
        for _round in range(args.runs):
            for label, play in plays.items():
                elapsed, result = run_timed(["ansible-playbook", str(play), "-i", str(inventory), *extra])
                assert "train.py" in result.stdout or label == "a_without", result.stdout[-2000:]
                seconds[label].append(elapsed)
    medians = {label: round(statistics.median(values), 3) for label, values in seconds.items()}
    report = {"commit": commit(), "runs": args.runs, "hosts": args.hosts, "seconds": seconds,
              "median_seconds": medians,
              "mapping_cost_seconds": round(medians["b_with_mapping"] - medians["a_without"], 3),
              "ratio_b/a": round(medians["b_with_mapping"] / medians["a_without"], 3)}
    out = REPO / "bench" / "results" / "typed_names.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({key: report[key] for key in ("median_seconds", "mapping_cost_seconds", "ratio_b/a")}, indent=1))


if __name__ == "__main__":
    main()
