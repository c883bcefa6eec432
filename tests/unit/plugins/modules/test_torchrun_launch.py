"""Unit tests for plugins/modules/torchrun_launch.py itself: its argument spec, documentation,
result keys and examples agree."""

from __future__ import annotations

import yaml

from ansible_collections.torchfleet.cluster.plugins.modules import torchrun_launch as tl


# ---------------------------------------------------------------------------------------------
# Documentation and argument spec agree
# ---------------------------------------------------------------------------------------------

def _doc(name):
    return yaml.safe_load(getattr(tl, name))


def test_argument_spec_matches_documentation():
    options = _doc("DOCUMENTATION")["options"]
    assert set(options) == set(tl.ARGUMENT_SPEC)
    for name, spec in tl.ARGUMENT_SPEC.items():
        doc = options[name]
        assert doc["type"] == spec["type"], name
        assert doc.get("default") == spec.get("default"), name
        assert doc.get("choices") == spec.get("choices"), name
        assert doc.get("elements") == spec.get("elements"), name
    suboptions = options["nodes"]["suboptions"]
    assert {name: (doc["type"], doc.get("required", False)) for name, doc in suboptions.items()} \
        == {name: (spec["type"], spec.get("required", False))
            for name, spec in tl.ARGUMENT_SPEC["nodes"]["options"].items()}
    assert tl.ARGUMENT_SPEC["env_secrets"]["no_log"] is True


def test_every_result_key_is_documented():
    documented = set(_doc("RETURN"))
    for key in ("rc", "run_id", "argv", "command", "hostfile", "hostfile_path", "env",
                "per_node_env", "duration", "log_dir", "launcher_log", "rank_logs_dir",
                "worker_logs_dir", "nodes", "world_size", "timed_out", "stdout_tail",
                "failed_rank", "failed_host", "failed_exit_code", "failed_log", "failed_log_tail",
                "runs", "stopped", "port_holders", "survivors", "silent_nodes", "stopped_on_nodes"):
        assert key in documented, key


def test_examples_parse():
    assert len(_doc("EXAMPLES")) == 4
