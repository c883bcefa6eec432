"""A local cluster of containers that stands in for a handful of GPU machines: a tool for trying
torchfleet and for its tests, apart from the product (`torchfleet cluster up/down/image/status`).
The node images are built from node/ beside this file.

Every node runs a real sshd with its own host keys, sits on one user-defined Docker network and
carries a `docker0` bridge with the same address as every other node (the trap real Docker hosts
set for NCCL). `up` writes an Ansible inventory for the nodes that the playbooks use exactly as
they would use a real cluster's, with host key checking on.

The engine (engine.py), the node images (images.py), the cluster's life (cluster.py) and the
traffic counters of the tests and benchmarks (traffic.py); what their callers use is here.
"""

from torchfleet.devcluster.cluster import (
    DOMAIN, LABEL, SHARED_MOUNT, down, node_facts, restore_node, status, up, validate_name)
from torchfleet.devcluster.engine import ClusterError, ensure_engine
from torchfleet.devcluster.images import IMAGE, SLURM_IMAGE, ensure_image, ensure_slurm_image
from torchfleet.devcluster.traffic import ControllerTraffic, received_bytes

__all__ = ["DOMAIN", "LABEL", "SHARED_MOUNT", "down", "node_facts", "restore_node", "status", "up", "validate_name",
           "ClusterError", "ensure_engine", "IMAGE", "SLURM_IMAGE", "ensure_image", "ensure_slurm_image",
           "ControllerTraffic", "received_bytes"]
