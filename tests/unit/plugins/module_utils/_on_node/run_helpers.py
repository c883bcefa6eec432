"""Records of runs for the tests of the record and of the follower: a run held by this process,
as a live supervisor would hold it."""

import os
import time

from ansible_collections.torchfleet.cluster.plugins.module_utils._on_node.record import boot_id, process_start

TORCHRUN = {"nodes": ["n0", "n1", "n2"], "slots": [2, 2, 2], "mode": "torchrun", "nproc": 2}


def running_record(run_id="r1", **changes):
    me = os.getpid()
    record = {"run_id": run_id, "state": "running", "rc": None, "supervisor_pid": me,
              "supervisor_start": process_start(me), "boot_id": boot_id(),
              "started_at": time.time(), **TORCHRUN}
    record.update(changes)
    return record
