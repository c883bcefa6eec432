"""`torchfleet cluster`: the local cluster of containers (torchfleet.devcluster)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def cluster_command(args: argparse.Namespace) -> int:
    from torchfleet import devcluster  # only this command needs it: the others start sooner

    try:
        name = devcluster.validate_name(args.name)
        inventory = Path(args.inventory) if args.inventory else None
        if args.action == "up":
            written = devcluster.up(name=name, nodes=args.nodes, inventory=inventory, slurm=args.slurm)
            if args.slurm:
                print(f"torchfleet: the nodes have Slurm's packages; set Slurm up with: ansible-playbook "
                      f"setup.yml -i {written} -e scheduler=slurm", file=sys.stderr)
        elif args.action == "down":
            devcluster.down(name=name, inventory=inventory)
        elif args.action == "image":
            devcluster.ensure_engine()
            build = devcluster.ensure_slurm_image if args.slurm else devcluster.ensure_image
            print(build(rebuild=args.rebuild))
        elif args.action == "status":
            rows = devcluster.status(name)
            if args.json:
                print(json.dumps(rows))
            else:
                for row in rows:
                    print(f"{row['name']:<24} {'running' if row['running'] else 'stopped':<8} {row['address']}")
    except devcluster.ClusterError as error:
        print(f"torchfleet: error: {error}", file=sys.stderr)
        return 1
    return 0
