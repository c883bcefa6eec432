# -*- coding: utf-8 -*-
# Copyright: torchfleet contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The launch request: one ``LaunchRequest``, a typed field per option of the torchrun_launch
module (the option table, _launch_options.py, writes the fields: tools/write_launch_options.py),
made once from the module's parameters (``of``). The module renders from it, run.json keeps it
(``stored``: no secret value, no file contents) and the run's supervisor reads it back as the
same class (``from_stored``).

Pure and standard library only: it runs in the head package too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

REDACTED = "<redacted>"


@dataclass(frozen=True)
class LaunchRequest:  # pylint: disable=too-many-instance-attributes
    """A launch: every option of the torchrun_launch module, at the table's default where not given."""

    # BEGIN fields written by tools/write_launch_options.py: do not edit
    state: str = "started"
    nodes: list[dict[str, Any]] | None = None
    head: str | None = None
    script: str | None = None
    script_args: list[str] = field(default_factory=list)
    run_id: str | None = None
    mode: str = "torchrun"
    mpich_launcher: str | None = None
    master_port: int = 29500
    nproc_per_node: int | None = None
    python: str = "python3"
    torchrun: str = "torchrun"
    launcher: str | None = None
    network: str | None = None
    env_pass: list[str] = field(default_factory=list)
    env_secrets: dict[str, Any] = field(default_factory=dict)
    env_set: dict[str, Any] = field(default_factory=dict)
    mpirun_extra_args: list[str] = field(default_factory=list)
    torchrun_extra_args: list[str] = field(default_factory=list)
    allow_run_as_root: bool = False
    tree_spawn: bool = False
    bind_to: str = "none"
    share_nodes: bool = False
    log_dir: str = "~/torchfleet/runs"
    launch_timeout: int = 0
    start_timeout: int = 180
    heartbeat_timeout: int = 30
    hang_timeout: str = "auto"
    max_restarts: int = 0
    min_nodes: int = 0
    restart_wait: int = 300
    spare_nodes: int = 0
    rejoin_after: int = 10
    fault_tolerance: str = "none"
    torchft_heartbeat_ms: int = 1000
    final_exit_codes: list[int] = field(default_factory=list)
    silent_node_timeout: int = 120
    stop_grace: int = 10
    chdir: str | None = None
    file_contents: dict[str, Any] = field(default_factory=dict)
    check_nodes: bool = True
    expect_packages: dict[str, Any] = field(default_factory=dict)
    detach: bool = False
    detach_when: str = "running"
    scheduler: str = "none"
    slurm_partition: str | None = None
    slurm_account: str | None = None
    slurm_time_limit: str | None = None
    slurm_gpus_per_node: int | None = None
    slurm_extra_args: list[str] = field(default_factory=list)
    batch_whole_nodes: bool = True
    # END fields

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> LaunchRequest:
        """The request of the options `given` (the module's parameters); the table's default for
        each left out or None, and keys of no module option ignored."""
        names = {item.name for item in fields(cls)}
        return cls(**{name: value for name, value in given.items() if name in names and value is not None})

    def stored(self) -> dict[str, Any]:
        """The request as run.json keeps it: env_secrets' names only, not the files' contents
        (their digests are in the plan's node_checks)."""
        kept = asdict(self)
        kept["env_secrets"] = sorted(self.env_secrets)
        kept.pop("file_contents")
        return kept

    @classmethod
    def from_stored(cls, kept: Mapping[str, Any]) -> LaunchRequest:
        """The request run.json keeps (stored), read back: each secret's value redacted."""
        secrets = kept.get("env_secrets") or ()
        return cls.of({**kept, "env_secrets": {name: REDACTED for name in secrets}})

    def redacted(self) -> LaunchRequest:
        """The request as run.json gives it back: what the run's supervisor and a restart see."""
        return self.from_stored(self.stored())

    def with_changes(self, **changes: Any) -> LaunchRequest:
        return replace(self, **changes)

    @property
    def shares_nodes(self) -> bool:
        """Whether another account's run on the nodes is no reason to refuse this one: asked for
        (share_nodes), or under Slurm, which shares the nodes out (another's job makes it queue).
        The launch's check and each attempt's board entry ask this one rule."""
        return bool(self.share_nodes) or self.scheduler == "slurm"
