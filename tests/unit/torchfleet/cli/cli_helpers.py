"""What the CLI's tests share: running the command in-process, an inventory, cached facts."""

import json
from pathlib import Path

from torchfleet import cli

# Script arguments a shell, Jinja or YAML would each read as something else.
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


def write_facts(cache: Path, host: str, address: str, gpus: int, enveloped: bool = False, **more):
    facts = {"preflight_net": {"interface": "eth1", "address": address, "network": "10.9.0.0/24"},
             "preflight_gpu_count": gpus, "python_env_python": "/opt/env/bin/python",
             "python_env_torchrun": "/opt/env/bin/torchrun", "openmpi_mpirun": "/usr/bin/mpirun",
             **more}
    cache.mkdir(exist_ok=True)
    if not enveloped:  # torchfleet.cluster.json_facts (and jsonfile before 2.19): plain JSON named after the host
        (cache / host).write_text(json.dumps(facts))
    else:  # ansible.builtin.jsonfile of 2.19: schema prefix, a JSON payload, tagged values
        payload = {key: tagged(value) for key, value in facts.items()}
        (cache / f"s1_{host}").write_text(json.dumps({"__payload__": json.dumps(payload)}))
