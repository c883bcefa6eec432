"""A run where one rank stops: every rank marks each step (TORCHFLEET_STEP N), then all-reduces
over gloo. On the first attempt, the rank named by --stop-rank blocks at --stop-at in a function
of its own before marking that step; the others mark it and wait for it in the all_reduce (gloo's
30-minute timeout), as the ranks of a real hang wait. A restart runs to its end.

With --for-seconds, every rank steps apart from the others for that long (no collective until
the end), the rank named by --slow-rank four times slower: a straggler, the one named by --bar-rank
drawing a `\r` progress bar instead of marks; then, with --quiet-for,
rank 0 writes nothing for that long (an evaluation, a checkpoint) while the others wait for it.
With --chatter, a thread on every rank prints a line that often, whatever the steps do."""

import argparse
import os
import threading
import time

import torch
import torch.distributed as dist


def chatter(every):
    while True:
        time.sleep(every)
        print("a logging thread's line", flush=True)


def stuck_in_a_function_of_its_own():
    threading.Event().wait()  # blocked in C, as a rank in a deadlock or a stuck read


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--sleep", type=float, default=0.2, help="seconds between two steps")
    parser.add_argument("--stop-rank", type=int, default=None)
    parser.add_argument("--stop-at", type=int, default=20)
    parser.add_argument("--for-seconds", type=float, default=None)
    parser.add_argument("--slow-rank", type=int, default=None)
    parser.add_argument("--quiet-for", type=float, default=0.0)
    parser.add_argument("--bar-rank", type=int, default=None)
    parser.add_argument("--chatter", type=float, default=None,
                        help="every rank also prints a line this often from a thread (a logger), steps or not")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if args.chatter:
        threading.Thread(target=chatter, args=(args.chatter,), daemon=True).start()
    if args.for_seconds:
        step_apart(rank, args)
        return
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


def step_apart(rank, args):
    sleep = args.sleep * (4 if rank == args.slow_rank else 1)
    step, end = 0, time.monotonic() + args.for_seconds
    while time.monotonic() < end:
        step += 1
        if rank == args.bar_rank:  # a progress bar redrawn in place: no newline, no mark
            print(f"\rstep {step} [{'#' * (step % 20):<20}]", end="", flush=True)
        else:
            print(f"TORCHFLEET_STEP {step}", flush=True)
        time.sleep(sleep)
    if rank == 0:
        time.sleep(args.quiet_for)
    dist.barrier()
    print(f"TORCHFLEET_STEP {step + 1}", flush=True)
    print(f"STEPPED_APART rank={rank} steps={step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
