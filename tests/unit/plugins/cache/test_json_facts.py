"""torchfleet.cluster.json_facts through real `ansible-playbook` runs: what one caches, the next reads."""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from torchfleet.collection import collections_path


def playbook(tmp_path, tasks):
    """One play of `tasks` on localhost, run from tmp_path (no ansible.cfg there), its facts cached
    in tmp_path/facts; returns the output."""
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections_path()),
               ANSIBLE_CACHE_PLUGIN="torchfleet.cluster.json_facts",
               ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"), ANSIBLE_LOCALHOST_WARNING="False")
    env.pop("ANSIBLE_CONFIG", None)
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-c", "local", str(path)]
    result = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_a_cached_fact_is_a_plain_json_file_that_the_next_run_reads(tmp_path):
    # A literal that looks like a template: cached and read back, it stays that text.
    playbook(tmp_path, [{"ansible.builtin.set_fact": {
        "net": {"address": "10.0.0.1", "slots": 2}, "text": "{% raw %}{{ 6 * 7 }}{% endraw %}", "cacheable": True}}])
    # One file under the host's own name (no s1_ prefix, no temporary file left), plain JSON.
    assert [path.name for path in (tmp_path / "facts").iterdir()] == ["localhost"]
    cached = json.loads((tmp_path / "facts" / "localhost").read_text())
    assert cached["net"] == {"address": "10.0.0.1", "slots": 2} and cached["text"] == "{{ 6 * 7 }}"

    out = playbook(tmp_path, [{"ansible.builtin.debug": {"msg": "{{ net.slots + 1 }} {{ text }}"}}])
    assert '"msg": "3 {{ 6 * 7 }}"' in out, out
