"""A run where one rank stops: every rank marks each step (TORCHFLEET_STEP N), then all-reduces
over gloo. On the first attempt, the rank named by --stop-rank blocks at --stop-at in a function
of its own before marking that step; the others mark it and wait for it in the all_reduce (gloo's
30-minute timeout), as the ranks of a real hang wait. A restart runs to its end."""

import argparse
import os
import threading
import time

import torch
import torch.distributed as dist


def stuck_in_a_function_of_its_own():
    threading.Event().wait()  # blocked in C, as a rank in a deadlock or a stuck read


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--sleep", type=float, default=0.2, help="seconds between two steps")
    parser.add_argument("--stop-rank", type=int, default=None)
    parser.add_argument("--stop-at", type=int, default=20)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    first = os.environ.get("TORCHFLEET_RESTART_COUNT", "0") == "0"
    for step in range(1, args.steps + 1):
        if first and rank == args.stop_rank and step == args.stop_at:
            stuck_in_a_function_of_its_own()
        print(f"TORCHFLEET_STEP {step}", flush=True)
        total = torch.tensor([step])
        dist.all_reduce(total)
        time.sleep(args.sleep)
    print(f"STOPPING_RANK_DONE rank={rank} steps={args.steps}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
