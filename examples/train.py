#!/usr/bin/env python3
"""Minimal DistributedDataParallel (DDP) training example for torchfleet.

Start it with torchrun (torchfleet does this for you through mpirun), e.g.:

    torchrun --standalone --nproc-per-node=2 train.py --use-syn --epochs 3

It trains a small CNN on either

* synthetic data (``--use-syn``, the default when no ``--data-dir`` is given):
  images are noisy, low-frequency class templates and each label is the
  template that best matches the image (a fixed, seeded function of the
  input), so the problem is learnable and the loss goes down; or
* a dataset stored in ``--data-dir DIR``: ``DIR/train.pt`` (or DIR itself if it
  is a file), written with ``torch.save`` as a dict with
      ``images``      float tensor of shape (N, C, H, W)
      ``labels``      integer tensor of shape (N,), values in [0, num_classes)
      ``num_classes`` optional int (default: labels.max() + 1)
  e.g. ``torch.save({"images": x, "labels": y}, "data/train.pt")``.

The process group is initialised from the variables torchrun sets (RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT); backend
``nccl`` with CUDA, ``gloo`` on CPU (override with ``--backend``).  Run without
torchrun it trains as a single process.

Output (machine-readable, for tests and tooling):

* every rank prints exactly one line at start:
  ``TORCHFLEET_RANK rank=R local_rank=L world_size=W local_world_size=LW host=HOST backend=B``
* every rank prints ``TORCHFLEET_STEP N`` (its optimizer steps so far) at most once a second:
  torchfleet's progress mark, from which a hung run is told (hang_timeout)
* global rank 0 prints one line per epoch:
  ``epoch E/N loss=X time=Ts samples_per_s=S``
* global rank 0 prints at the end:
  ``TORCHFLEET_RESULT {"world_size": W, "epochs": N, "losses": [...],
  "checkpoint": PATH, "resumed_from_epoch": E or null}``
  where ``losses`` holds the global (all-reduced) mean loss of every epoch
  1..N, including the epochs restored from a checkpoint.

Checkpoints (model, optimizer, epoch, losses) are written by global rank 0 at
the end of every epoch, atomically (temporary file + os.replace).  With
``--resume``, or when the run was restarted (TORCHFLEET_RESTART_COUNT, set by
torchfleet's max_restarts, or torchrun's TORCHELASTIC_RESTART_COUNT above 0),
every rank loads the checkpoint and training continues from the next epoch
(if it is missing, training starts from scratch).

Weights & Biases logging is done on global rank 0 only, and only when the
``wandb`` package imports and WANDB_API_KEY is set (disable with --no-wandb).

Test hooks (not for real training): ``--fail-on-rank N`` makes global rank N
exit with code 3 after its first step; ``--sleep SECONDS`` sleeps after every
step to make runs long enough for stop/timeout tests.
"""
import argparse
import gc
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

# Shape of the synthetic problem.
SYN_CHANNELS, SYN_SIZE, SYN_CLASSES = 3, 16, 10


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--use-syn", action="store_true", help="train on synthetic data (default without --data-dir)")
    src.add_argument("--data-dir", help="directory holding train.pt (see module docstring for the format)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps-per-epoch", type=int, default=20, help="per-rank steps per epoch (synthetic data)")
    p.add_argument("--out-dir", default=".", help="directory for the default checkpoint path")
    p.add_argument("--checkpoint", help="checkpoint file (default: OUT_DIR/checkpoint.pt)")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint if it exists")
    p.add_argument("--backend", choices=["nccl", "gloo", "mpi"], help="default: nccl with CUDA, else gloo")
    p.add_argument("--no-wandb", action="store_true", help="never log to Weights & Biases")
    # Older launchers (torch.distributed.launch) pass the local rank as an argument.
    p.add_argument("--local-rank", "--local_rank", dest="local_rank", type=int, default=None)
    # Test hooks.
    p.add_argument("--fail-on-rank", type=int, default=None, help="TEST HOOK: this global rank exits with code 3 after its first step")
    p.add_argument("--sleep", type=float, default=0.0, help="TEST HOOK: seconds to sleep after every step")
    args = p.parse_args()
    if args.checkpoint is None:
        args.checkpoint = os.path.join(args.out_dir, "checkpoint.pt")
    return args


class SmallCNN(nn.Module):
    def __init__(self, in_channels, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(4)  # works for any input size
        self.fc = nn.Linear(32 * 4 * 4, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = self.pool(F.relu(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


def synthetic_dataset(num_samples, seed):
    """Same data on every rank (same seed); labels are a function of the images."""
    g = torch.Generator().manual_seed(seed)
    # Low-frequency class templates: random 4x4 patterns upsampled to SYN_SIZE.
    small = torch.randn(SYN_CLASSES, SYN_CHANNELS, 4, 4, generator=g)
    templates = F.interpolate(small, size=(SYN_SIZE, SYN_SIZE), mode="nearest")
    y = torch.randint(0, SYN_CLASSES, (num_samples,), generator=g)
    x = 0.2 * templates[y] + torch.randn(num_samples, SYN_CHANNELS, SYN_SIZE, SYN_SIZE, generator=g)
    # Label = best-matching template, a deterministic function of the input.
    labels = (x.flatten(1) @ templates.flatten(1).t()).argmax(dim=1)
    return TensorDataset(x, labels), SYN_CHANNELS, SYN_CLASSES


def file_dataset(data_dir):
    path = data_dir if os.path.isfile(data_dir) else os.path.join(data_dir, "train.pt")
    if not os.path.isfile(path):
        raise SystemExit(f"error: dataset file {path} not found (expected --data-dir DIR with DIR/train.pt)")
    data = torch.load(path, map_location="cpu")
    images, labels = data["images"].float(), data["labels"].long()
    if images.dim() != 4 or labels.dim() != 1 or images.shape[0] != labels.shape[0]:
        raise SystemExit(f"error: {path}: need images (N,C,H,W) and labels (N,), got "
                         f"{tuple(images.shape)} and {tuple(labels.shape)}")
    num_classes = int(data.get("num_classes", int(labels.max()) + 1))
    return TensorDataset(images, labels), images.shape[1], num_classes


def save_checkpoint(path, state):
    """Atomic write: a reader sees either the old or the new file, never half of one."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path, rank, device):
    """Return the checkpoint dict on every rank, or None if rank 0 has none."""
    dist.barrier()  # nobody reads while someone might still be writing
    visible = [None] * dist.get_world_size()
    dist.all_gather_object(visible, os.path.isfile(path))
    if not visible[0]:
        return None
    if all(visible):  # shared or replicated file: every rank loads it itself
        return torch.load(path, map_location=device)
    # Not visible everywhere (no shared filesystem): rank 0 sends it to the others.
    obj = [torch.load(path, map_location="cpu") if rank == 0 else None]
    dist.broadcast_object_list(obj, src=0)
    return obj[0]


def init_wandb(args, world_size):
    if args.no_wandb or not os.environ.get("WANDB_API_KEY"):
        return None
    try:
        import wandb
        return wandb.init(project=os.environ.get("WANDB_PROJECT", "torchfleet"),
                          config={**vars(args), "world_size": world_size})
    except Exception as exc:  # logging must never break training
        print(f"wandb disabled: {type(exc).__name__}", flush=True)
        return None


def restarted():
    """Whether this is a restart of the run: torchfleet's (max_restarts) or torchrun's own."""
    return any(int(os.environ.get(name) or 0) > 0
               for name in ("TORCHFLEET_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"))


def main():
    args = parse_args()

    # Without torchrun: behave like a one-process job.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    rank = int(os.environ.setdefault("RANK", "0"))
    world_size = int(os.environ.setdefault("WORLD_SIZE", "1"))
    local_rank = args.local_rank if args.local_rank is not None else int(os.environ.get("LOCAL_RANK", "0"))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))

    use_cuda = torch.cuda.is_available()
    backend = args.backend or ("nccl" if use_cuda else "gloo")
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend=backend, init_method="env://", rank=rank, world_size=world_size)
    print(f"TORCHFLEET_RANK rank={rank} local_rank={local_rank} world_size={world_size} "
          f"local_world_size={local_world_size} host={socket.gethostname()} backend={dist.get_backend()}",
          flush=True)

    def log(msg):
        if rank == 0:
            print(msg, flush=True)

    # Data: every rank sees its own 1/world_size shard of each epoch.
    if args.data_dir:
        dataset, channels, num_classes = file_dataset(args.data_dir)
    else:
        n = args.steps_per_epoch * args.batch_size * world_size
        dataset, channels, num_classes = synthetic_dataset(n, args.seed)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, pin_memory=use_cuda)

    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP also broadcasts them)
    model = SmallCNN(channels, num_classes).to(device)
    ddp_model = DDP(model, device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr, momentum=0.9)

    start_epoch, losses, resumed_from = 0, [], None
    if args.resume or restarted():
        ckpt = load_checkpoint(args.checkpoint, rank, device)
        if ckpt is None:
            log(f"no checkpoint at {args.checkpoint}, starting from scratch")
        else:
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            start_epoch = resumed_from = int(ckpt["epoch"])
            losses = list(ckpt.get("losses", []))[:start_epoch]
            log(f"resumed from {args.checkpoint} at epoch {start_epoch}")

    wb = init_wandb(args, world_size) if rank == 0 else None
    log(f"training {sum(p.numel() for p in model.parameters())} parameters on {len(dataset)} samples, "
        f"world_size={world_size}, backend={backend}, device={device.type}")

    first_step, step, marked = True, 0, 0.0
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)
        ddp_model.train()
        t0 = time.perf_counter()
        stats = torch.zeros(2, device=device)  # [sum of losses, number of samples]
        for images, labels in loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp_model(images), labels)
            loss.backward()
            optimizer.step()
            stats[0] += loss.detach() * labels.size(0)
            stats[1] += labels.size(0)
            if first_step and args.fail_on_rank == rank:
                print(f"TORCHFLEET_FAIL rank={rank}: --fail-on-rank test hook, exiting with code 3",
                      file=sys.stderr, flush=True)
                sys.stdout.flush()
                # Not sys.exit: the interpreter's teardown with the process group's threads alive can abort
                # ("terminate called without an active exception", code 134) instead of exiting with 3.
                os._exit(3)
            first_step = False
            step += 1
            if time.monotonic() - marked >= 1.0:  # torchfleet's progress mark, at most once a second
                print(f"TORCHFLEET_STEP {step}", flush=True)
                marked = time.monotonic()
            if args.sleep > 0:
                time.sleep(args.sleep)
        dist.all_reduce(stats, op=dist.ReduceOp.SUM)  # global mean loss over all ranks
        epoch_time = time.perf_counter() - t0
        mean_loss = (stats[0] / stats[1]).item()
        samples = int(stats[1].item())
        losses.append(mean_loss)
        log(f"epoch {epoch + 1}/{args.epochs} loss={mean_loss:.4f} time={epoch_time:.2f}s "
            f"samples_per_s={samples / epoch_time:.1f}")
        if wb is not None:
            wb.log({"epoch": epoch + 1, "loss": mean_loss, "epoch_time": epoch_time,
                    "samples_per_s": samples / epoch_time})
        if rank == 0:
            save_checkpoint(args.checkpoint, {"epoch": epoch + 1, "model": model.state_dict(),
                                              "optimizer": optimizer.state_dict(), "losses": losses,
                                              "world_size": world_size})
            # torchfleet's one line: the checkpoint is complete, a run may grow to a node back now.
            print(f"TORCHFLEET_CHECKPOINT epoch={epoch + 1}", flush=True)
        dist.barrier()  # the checkpoint is complete before anyone moves on

    if rank == 0:
        result = {"world_size": world_size, "epochs": args.epochs, "losses": losses,
                  "checkpoint": os.path.abspath(args.checkpoint), "resumed_from_epoch": resumed_from}
        print("TORCHFLEET_RESULT " + json.dumps(result), flush=True)
    if wb is not None:
        wb.finish()
    # Tear down while every rank is still alive and the interpreter whole: left to the garbage
    # collector at interpreter exit, the DDP reducer's process group died with a C++ abort
    # (SIGABRT, "terminate called without an active exception") in about 1 run in 10.
    dist.barrier()
    del ddp_model, optimizer, loader, sampler
    gc.collect()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
