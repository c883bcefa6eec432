"""A rank that prints a line a tick and sleeps between them: the script the cluster tests launch
where they prove what torchfleet does with a run (detach, follow, wait, stop, Ctrl-C), not what
PyTorch does. It imports no torch: torch's import and DistributedDataParallel's are most of
what a rank of examples/train.py costs (docs/performance.md), and the tests that prove training
still launch examples/train.py.

Its lines: `TICKER rank=R local_rank=L world_size=W host=H` first, `tick N/M` after each sleep,
`TICKER_DONE {"world_size": W, "ticks": M}` last; the rank named by --fail-on-rank says
`TICKER_FAIL rank=R` after its first tick and exits with 3.
"""

import argparse
import json
import os
import socket
import sys
import time


def main():
    parser = argparse.ArgumentParser(description="A rank that prints a line a tick.")
    parser.add_argument("--ticks", type=int, default=1000)
    parser.add_argument("--sleep", type=float, default=0.8, help="seconds before each tick")
    parser.add_argument("--fail-on-rank", type=int, default=None)
    args = parser.parse_args()
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    print(f"TICKER rank={rank} local_rank={os.environ['LOCAL_RANK']} world_size={world_size} "
          f"host={socket.gethostname()}", flush=True)
    for tick in range(1, args.ticks + 1):
        time.sleep(args.sleep)
        print(f"tick {tick}/{args.ticks}", flush=True)
        if rank == args.fail_on_rank:
            print(f"TICKER_FAIL rank={rank}", flush=True)
            sys.exit(3)
    print("TICKER_DONE " + json.dumps({"world_size": world_size, "ticks": args.ticks}), flush=True)


if __name__ == "__main__":
    main()
