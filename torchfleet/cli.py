"""The `torchfleet` command."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from torchfleet import localcluster


def _cluster(args: argparse.Namespace) -> int:
    name = localcluster.validate_name(args.name)
    inventory = Path(args.inventory) if args.inventory else None
    if args.action == "up":
        localcluster.up(name=name, nodes=args.nodes, inventory=inventory)
    elif args.action == "down":
        localcluster.down(name=name, inventory=inventory)
    elif args.action == "image":
        localcluster.ensure_engine()
        print(localcluster.ensure_image(rebuild=args.rebuild))
    elif args.action == "status":
        rows = localcluster.status(name)
        if args.json:
            print(json.dumps(rows))
        else:
            for row in rows:
                print(f"{row['name']:<24} {'running' if row['running'] else 'stopped':<8} {row['address']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchfleet",
        description="Turn a handful of machines into a multi-node PyTorch cluster and launch on it.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    cluster = sub.add_parser("cluster", help="a local cluster of containers for trying and testing")
    cluster.add_argument("action", choices=["up", "down", "image", "status"],
                         help="up: start (or keep) the nodes; down: remove them; image: build the node "
                              "image only; status: list the nodes")
    cluster.add_argument("--nodes", type=int, default=3, help="number of nodes for `up` (default 3)")
    cluster.add_argument("--name", default="local",
                         help="cluster name; containers are tf-NAME-nodeN (default: local)")
    cluster.add_argument("--inventory", help="where `up` writes the inventory (default: inventory/NAME.yml)")
    cluster.add_argument("--rebuild", action="store_true", help="with `image`: build even if cached")
    cluster.add_argument("--json", action="store_true", help="with `status`: print JSON")
    cluster.set_defaults(func=_cluster)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except localcluster.ClusterError as error:
        print(f"torchfleet: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
