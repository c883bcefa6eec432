"""The streaming benchmark's job: rank 0 prints `TICK i WALLCLOCK` every --interval seconds, the
others wait as long; no torch needed (torchrun or Open MPI set RANK)."""
import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--lines", type=int, default=30)
parser.add_argument("--interval", type=float, default=0.25)
args = parser.parse_args()
for i in range(args.lines):
    if os.environ.get("RANK", "0") == "0":
        print(f"TICK {i} {time.time():.6f}", flush=True)
    time.sleep(args.interval)
