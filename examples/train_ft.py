"""Data-parallel training that trains through a lost node, on torchft (pip: torchft).

Each node is one replica group (its own torchrun, its ranks' own process group); torchft's
Manager forms a quorum of the groups alive at every step through the Lighthouse, so a group that
dies is dropped at the next step and the others go on, and a group that comes back heals from a
live peer (the model and optimizer sent over the network, not read from disk) and trains along.

torchfleet starts it with `torchfleet launch --fault-tolerance torchft examples/train_ft.py`,
which sets what torchft reads: TORCHFT_LIGHTHOUSE, REPLICA_GROUP_ID, NUM_REPLICA_GROUPS, and
torchrun's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT within the node. Run by hand, start
`torchft_lighthouse --min_replicas 1` first and set those yourself.

Synthetic data (a fixed random regression problem): every group ends with the same parameters,
which the last line prints as a checksum.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from datetime import timedelta

import torch
from torch import nn
from torchft import Manager, Optimizer, ProcessGroupGloo


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps to train")
    parser.add_argument("--sleep", type=float, default=0.05, help="seconds each step also takes (a slower model)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds a collective or quorum may wait for a group that went silent")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    group = int(os.environ.get("REPLICA_GROUP_ID", "0"))
    torch.manual_seed(0)  # the same start on every group; healing overwrites a late joiner's anyway
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def state_dict():
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}

    def load_state_dict(state):
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])

    timeout = timedelta(seconds=args.timeout)
    manager = Manager(pg=ProcessGroupGloo(timeout=timeout), min_replica_size=1, load_state_dict=load_state_dict,
                      state_dict=state_dict, replica_id=f"group_{group}", timeout=timeout,
                      quorum_timeout=timeout * 3, connect_timeout=timeout * 3)
    # The gradients averaged by the manager itself, not torchft's DistributedDataParallel: in
    # torchft 0.2.0 its communication hook fails (`assert fut._fut`) once a peer's death has
    # errored the step, and ends the survivor (docs/fault-tolerance.md).
    optimizer = Optimizer(manager, optimizer)  # zero_grad starts the step's quorum; step commits
    # The data each group sees at a step: its own slice of a fixed problem.
    target = torch.randn(16, 1, generator=torch.Generator().manual_seed(1))
    began = time.monotonic()
    while manager.current_step() < args.steps:
        step = manager.current_step()
        data = torch.randn(args.batch, 16, generator=torch.Generator().manual_seed(step * 1000 + group))
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(data), data @ target)
        loss.backward()
        for param in model.parameters():  # a peer lost mid-step: a no-op, and the step is not committed
            manager.allreduce(param.grad).wait()
        optimizer.step()  # applied only where the quorum committed the step; else redone
        time.sleep(args.sleep)
        print(f"TORCHFLEET_STEP {manager.current_step()} group={group} participants={manager.num_participants()} "
              f"loss={loss.item():.4f} t={time.time():.3f}", flush=True)
    values = [value for param in model.parameters() for value in param.detach().flatten().tolist()]
    result = {"group": group, "steps": manager.current_step(), "seconds": round(time.monotonic() - began, 1),
              "params_sha256": hashlib.sha256(json.dumps(values).encode()).hexdigest()[:16]}
    print("TORCHFLEET_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
