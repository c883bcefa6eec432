"""Unit tests for plugins/modules/torchrun_launch.py itself: its result keys are documented (its
options: tests/unit/plugins/doc_fragments/test_torchrun_launch_options.py)."""

from __future__ import annotations

import yaml

from ansible_collections.torchfleet.cluster.plugins.modules import torchrun_launch as tl


# ---------------------------------------------------------------------------------------------
# Documentation and results agree
# ---------------------------------------------------------------------------------------------

def _doc(name):
    return yaml.safe_load(getattr(tl, name))


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
