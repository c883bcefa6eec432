"""`torchfleet render`: the launch command, hostfile and environment (or a PBS/Slurm batch
script) from the inventory and setup's cached facts; runs nothing."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from torchfleet.cli.usage import UsageError


def render_command(args: argparse.Namespace) -> int:
    from torchfleet import dry_run as tfplan
    from torchfleet.collection import module_util
    from torchfleet.extra_vars import parse_extra_vars
    from torchfleet.inventory import cluster_group, inventory_paths, read_inventory
    from torchfleet.ansible_calls import ansible_env, fact_cache_dir
    from torchfleet.cli.launch import option_flags_given

    # The flags of the launch's options, over -e, as `torchfleet launch` passes them to launch.yml.
    extra = {**parse_extra_vars(args.extra_vars), **option_flags_given(args, "launch")}
    batch = args.format in ("pbs", "slurm")
    with tempfile.TemporaryDirectory(prefix="torchfleet-inv-") as scratch:
        if batch and not args.inventory and not Path("inventory").is_dir():
            hosts, hostvars, group_hosts = [], {}, []
        else:
            inventories = inventory_paths(args.inventory, Path(scratch))
            env = dict(os.environ, **ansible_env())
            hosts, hostvars = read_inventory(inventories, env, limit=args.limit, group=cluster_group(extra))
            # The group's hosts beside those --limit leaves, as the launch's checks take them.
            group_hosts = read_inventory(inventories, env, group=cluster_group(extra))[0] if args.limit else hosts
    if batch:
        if not args.nodes or args.nodes < 1:
            raise UsageError(f"--format {args.format} needs --nodes N (the allocation's node count)")
    plan, source = tfplan.build(args.script, list(args.script_args), extra, hosts, hostvars,
                                fact_cache_dir(), batch_nodes=args.nodes if batch else None,
                                batch_slots=args.gpus_per_node, batch_format=args.format,
                                group_hosts=group_hosts)
    rendered = tfplan.render(plan)
    if batch:
        whole = tfplan.as_bool(extra.get("batch_whole_nodes", True))
        try:
            script = module_util("_on_node.batch_script").batch_script(
                args.format, plan, rendered, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                walltime=args.walltime, queue=args.queue, account=args.account, whole_nodes=whole,
                extra_args=extra.get(f"{args.format}_extra_args") or [])
        except ValueError as error:
            raise UsageError(str(error)) from error
        sys.stdout.write(script)
        return 0
    origin = ("the cached facts of setup" if source == "facts" else "the inventory alone (no facts cached: run "
              "`torchfleet setup` for the real addresses, interfaces and paths)")
    print(f"torchfleet: rendered from {origin}",
          file=sys.stderr)
    if args.json:
        print(json.dumps(tfplan.as_json(plan, rendered, source), indent=1))
    else:
        sys.stdout.write(tfplan.as_text(plan, rendered, source))
    return 0
