#!/usr/bin/env python3
"""Sharded (FSDP2) training example for torchfleet, with sharded DCP checkpoints.

Start it with torchrun (torchfleet does this for you through mpirun), e.g.:

    torchrun --standalone --nproc-per-node=4 train_fsdp.py --epochs 3 --checkpoint-dir /shared/ck
    torchrun --standalone --nproc-per-node=2 train_fsdp.py --epochs 5 --checkpoint-dir /shared/ck --resume

It trains a small causal transformer language model (token + position
embedding, pre-norm attention/MLP blocks, LM head) on synthetic data only: a
fixed, seeded next-token table (``--seed``) generates the sequences, and with
probability ``--noise`` a token is replaced by a random one, so the loss goes
down quickly from ln(vocab) towards the noise floor.  Every rank draws its own
batches.  There is no --data-dir; put your own data loader in ``batches``.

``--strategy fsdp`` (default) shards every block with FSDP2 (``fully_shard``),
then the root module; ``--strategy ddp`` wraps the same model, data and loop in
DistributedDataParallel, so both can be timed on the same cluster.  On CUDA,
FSDP computes in bf16 (MixedPrecisionPolicy, fp32 gradient reduction) and DDP
under bf16 autocast; on CPU everything is fp32.

The process group is initialised from the variables torchrun sets (env://);
backend ``nccl`` with CUDA, ``gloo`` on CPU (override with ``--backend``).
Run without torchrun it trains as a single process.

Output (machine-readable, the same lines as train.py):

* every rank, once: ``TORCHFLEET_RANK rank=R local_rank=L world_size=W local_world_size=LW host=HOST backend=B``
* every rank, at most once a second: ``TORCHFLEET_STEP N`` (its optimizer steps so far), the progress mark
  from which torchfleet tells a hung run (hang_timeout)
* global rank 0, per epoch: ``epoch E/N loss=X time=Ts samples_per_s=S``
  (loss: global mean token loss; samples: sequences; time excludes the checkpoint save)
* global rank 0 at the end: ``TORCHFLEET_RESULT {json}`` with keys world_size,
  epochs, losses (every epoch 1..N, restored ones included), checkpoint
  (absolute directory or null), resumed_from_epoch, saved_world_size (world
  size that wrote the checkpoint resumed from), strategy, epoch_times (seconds
  of each epoch run by this process).

Checkpoints (``--checkpoint-dir``, default OUT_DIR/checkpoint-STRATEGY) are
written with torch.distributed.checkpoint at the end of every epoch: each rank
writes its own shard into ``DIR/epoch-N/`` (``*.distcp`` + ``.metadata``)
holding the model, the AdamW state and a JSON string with epoch, losses, world
size, strategy and model shape.  Once every rank has finished, rank 0 points
the file ``DIR/latest`` at it (temporary file + os.replace), so a crash during
a save leaves the previous checkpoint in use; only the newest two epoch
directories are kept.  ``--resume`` loads ``latest``; DCP reshards on load, so
the world size (and even the strategy) may differ from the run that saved it.
The model shape (--vocab/--dim/--layers/--heads/--seq-len) must stay the same.
A run without --resume starts over and replaces the directory's checkpoints.
The default directory is per strategy so that timing runs of both don't mix.

Because every rank writes a shard, the directory must be on storage all nodes
share (NFS, Lustre, GPFS); this is checked before training (exit code 2 if
not).  ``--no-checkpoint`` turns checkpointing off.

Test hooks (not for real training): ``--fail-on-rank N`` makes global rank N
exit with code 3 after its first step; ``--sleep SECONDS`` sleeps after every
step.
"""
import argparse
import contextlib
import gc
import json
import os
import re
import secrets
import shutil
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

SHAPE_KEYS = ("vocab", "dim", "layers", "heads", "seq_len")  # must match to resume


def emit(line, stream=sys.stdout):
    # One write per line: unbuffered (PYTHONUNBUFFERED=1), print() writes the text and the newline
    # separately, and the lines of ranks sharing one stdout got glued together.
    stream.write(line + "\n")
    stream.flush()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    p.add_argument("--strategy", choices=["fsdp", "ddp"], default="fsdp")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps-per-epoch", type=int, default=10, help="per-rank steps per epoch")
    p.add_argument("--batch-size", type=int, default=8, help="per-rank sequences per step")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--noise", type=float, default=0.1, help="probability of a random instead of the rule's next token")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", default=".", help="directory for the default checkpoint directory")
    p.add_argument("--checkpoint-dir", help="sharded checkpoint directory (default: OUT_DIR/checkpoint-STRATEGY)")
    p.add_argument("--no-checkpoint", action="store_true", help="do not save checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from CHECKPOINT_DIR/latest if it exists")
    p.add_argument("--backend", choices=["nccl", "gloo", "mpi"], help="default: nccl with CUDA, else gloo")
    p.add_argument("--local-rank", "--local_rank", dest="local_rank", type=int, default=None)
    p.add_argument("--fail-on-rank", type=int, default=None, help="TEST HOOK: this global rank exits with code 3 after its first step")
    p.add_argument("--sleep", type=float, default=0.0, help="TEST HOOK: seconds to sleep after every step")
    args = p.parse_args()
    if args.dim % args.heads:
        p.error("--dim must be a multiple of --heads")
    if args.resume and args.no_checkpoint:
        p.error("--resume needs a checkpoint directory; drop --no-checkpoint")
    if args.no_checkpoint:
        args.checkpoint_dir = None
    else:
        args.checkpoint_dir = os.path.abspath(args.checkpoint_dir or os.path.join(args.out_dir, f"checkpoint-{args.strategy}"))
    return args


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention + MLP."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, heads, t, head_dim)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab, dim, layers, heads, seq_len):
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(vocab, dim), nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _layer in range(layers))
        self.ln_f, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        # Logits as (batch * seq, vocab): a 2-D Linear output is no view, which FSDP2 warns about at the root.
        return self.head(self.ln_f(x).flatten(0, 1))


def batches(args, table, epoch, rank, device):
    """Yield (input, target) token batches: next token = table[token], or random with prob --noise."""
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + epoch * 10_007 + rank + 1)
    for _step in range(args.steps_per_epoch):
        tok = torch.randint(0, args.vocab, (args.batch_size,), generator=g)
        seq = [tok]
        for _position in range(args.seq_len):
            rnd = torch.randint(0, args.vocab, (args.batch_size,), generator=g)
            tok = torch.where(torch.rand(args.batch_size, generator=g) < args.noise, rnd, table[tok])
            seq.append(tok)
        seq = torch.stack(seq, 1).to(device)
        yield seq[:, :-1], seq[:, 1:]


def shared_storage_error(ckpt_dir, rank):
    """Return None if every rank sees a file rank 0 wrote into ckpt_dir, else an error line (same on all ranks)."""
    token = [None]  # rank 0 sends {"name", "value"} of the file it wrote, or {"error"}
    if rank == 0:
        try:
            os.makedirs(ckpt_dir, exist_ok=True)
            token[0] = {"name": f".torchfleet-shared-{secrets.token_hex(8)}", "value": secrets.token_hex(16)}
            with open(os.path.join(ckpt_dir, token[0]["name"]), "w") as f:
                f.write(token[0]["value"])
        except OSError as exc:
            token[0] = {"error": f"error: cannot write --checkpoint-dir {ckpt_dir}: {exc}"}
    dist.broadcast_object_list(token, src=0)
    if "error" in token[0]:
        return token[0]["error"]
    name, value = token[0]["name"], token[0]["value"]
    seen = False
    for _attempt in range(10):  # tolerate a little attribute-cache lag on network filesystems
        with contextlib.suppress(OSError), open(os.path.join(ckpt_dir, name)) as f:
            seen = f.read() == value
        if seen:
            break
        time.sleep(0.5)
    results = [None] * dist.get_world_size()
    dist.all_gather_object(results, (seen, socket.gethostname()))
    if rank == 0:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(ckpt_dir, name))
    blind = sorted({host for ok, host in results if not ok})
    if blind:
        return (f"error: --checkpoint-dir {ckpt_dir} is not on storage every node shares (host {', '.join(blind)} "
                f"cannot see what rank 0 wrote there): a sharded checkpoint needs a directory all nodes see "
                f"(NFS, Lustre, GPFS); give one, or pass --no-checkpoint")
    return None


def save_checkpoint(ckpt_dir, epoch, model, optimizer, train_state, rank):
    name = f"epoch-{epoch}"
    path = os.path.join(ckpt_dir, name)
    if rank == 0 and os.path.isdir(path):  # leftover of a crashed run: never mix its shards with ours
        shutil.rmtree(path)
    dist.barrier()
    msd, osd = get_state_dict(model, optimizer)
    dcp.save({"model": msd, "optim": osd, "train_state": json.dumps(train_state)}, checkpoint_id=path)
    dist.barrier()  # every shard and .metadata are written before `latest` may name them
    if rank == 0:
        tmp = os.path.join(ckpt_dir, f"latest.tmp.{os.getpid()}")
        with open(tmp, "w") as f:
            f.write(name + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(ckpt_dir, "latest"))
        # Keep this epoch and the newest older one; drop the rest (including crashed partial saves).
        older = sorted(int(m[1]) for d in os.listdir(ckpt_dir) if (m := re.fullmatch(r"epoch-(\d+)", d)))
        keep = {epoch} | {max((e for e in older if e < epoch), default=epoch)}
        for e in older:
            if e not in keep:
                shutil.rmtree(os.path.join(ckpt_dir, f"epoch-{e}"), ignore_errors=True)


def load_checkpoint(args, model, optimizer, rank):
    """Return (train_state dict, path) or (None, None); or an error line (str), the same on all ranks."""
    found = [None]
    if rank == 0:
        with contextlib.suppress(OSError), open(os.path.join(args.checkpoint_dir, "latest")) as f:
            found[0] = os.path.join(args.checkpoint_dir, f.read().strip())
            if not os.path.isfile(os.path.join(found[0], ".metadata")):
                found[0] = f"error: {args.checkpoint_dir}/latest names {found[0]}, which holds no complete checkpoint; remove `latest` to start over"
    dist.broadcast_object_list(found, src=0)
    path = found[0]
    if path is None or path.startswith("error:"):
        return path, None
    try:
        # First the small train_state alone, to check the model shape before touching the weights.
        state = {"train_state": ""}
        dcp.load(state, checkpoint_id=path)
        train_state = json.loads(state["train_state"])
        diff = [f"--{k.replace('_', '-')} {train_state['shape'][k]} (now {getattr(args, k)})"
                for k in SHAPE_KEYS if train_state["shape"][k] != getattr(args, k)]
        if diff:
            return f"error: checkpoint {path} has another model shape: {', '.join(diff)}; pass the same values or start without --resume", None
        msd, osd = get_state_dict(model, optimizer)  # templates; DCP fills them, resharding as needed
        state = {"model": msd, "optim": osd}
        dcp.load(state, checkpoint_id=path)
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    except Exception as exc:  # DCP raises on every rank alike, so all ranks exit together
        return f"error: cannot load checkpoint {path}: {type(exc).__name__}: {str(exc).strip().splitlines()[0]}", None
    for group in optimizer.param_groups:  # the checkpoint's lr would override --lr
        group["lr"] = args.lr
    return train_state, path


def restarted():
    """Whether this is a restart of the run: torchfleet's (max_restarts) or torchrun's own."""
    return any(int(os.environ.get(name) or 0) > 0
               for name in ("TORCHFLEET_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"))


def main():
    args = parse_args()
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
    emit(f"TORCHFLEET_RANK rank={rank} local_rank={local_rank} world_size={world_size} "
         f"local_world_size={local_world_size} host={socket.gethostname()} backend={dist.get_backend()}")

    def log(msg):
        if rank == 0:
            emit(msg)

    def fail(msg):  # called by every rank at the same point, so nobody is left waiting
        if rank == 0:
            emit(msg, sys.stderr)
        dist.destroy_process_group()
        sys.exit(2)

    if args.checkpoint_dir and world_size > 1:
        err = shared_storage_error(args.checkpoint_dir, rank)
        if err:
            fail(err)

    torch.manual_seed(args.seed)  # same initial weights on every rank (FSDP keeps each rank's shard of them)
    model = TinyLM(args.vocab, args.dim, args.layers, args.heads, args.seq_len).to(device)
    bf16 = use_cuda and torch.cuda.is_bf16_supported()
    if args.strategy == "fsdp":
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
        for block in model.blocks:  # one all-gather/reduce-scatter unit per block, ...
            fully_shard(block, mp_policy=mp)
        fully_shard(model, mp_policy=mp)  # ... and the root takes the embeddings, final norm and head
        autocast = contextlib.nullcontext
    else:
        model = DDP(model, device_ids=[local_rank] if use_cuda else None)
        autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)  # after sharding: it holds the shards

    start_epoch, losses, resumed_from, saved_world_size = 0, [], None, None
    if args.resume or (restarted() and not args.no_checkpoint):
        train_state, path = load_checkpoint(args, model, optimizer, rank)
        if isinstance(train_state, str):
            fail(train_state)
        if train_state is None:
            log(f"no checkpoint in {args.checkpoint_dir} (no 'latest' file), starting from scratch")
        else:
            start_epoch = resumed_from = train_state["epoch"]
            losses, saved_world_size = train_state["losses"][:start_epoch], train_state["world_size"]
            log(f"resumed from {path} at epoch {start_epoch} (saved by {train_state['strategy']} "
                f"with world_size={saved_world_size})")

    table = torch.randint(0, args.vocab, (args.vocab,), generator=torch.Generator().manual_seed(args.seed))
    n_params = sum(p.numel() for p in TinyLM(args.vocab, args.dim, args.layers, args.heads, args.seq_len).parameters())
    log(f"training {n_params} parameters with {args.strategy}, world_size={world_size}, backend={backend}, "
        f"device={device.type}, checkpoint_dir={args.checkpoint_dir}")

    first_step, epoch_times, step, marked = True, [], 0, 0.0
    for epoch in range(start_epoch, args.epochs):
        model.train()
        t0 = time.perf_counter()
        stats = torch.zeros(3, dtype=torch.float64, device=device)  # [sum of token losses, tokens, sequences]
        for inputs, targets in batches(args, table, epoch, rank, device):
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                logits = model(inputs)
            loss = F.cross_entropy(logits.float(), targets.flatten())
            loss.backward()
            optimizer.step()
            stats[0] += loss.detach() * targets.numel()
            stats[1] += targets.numel()
            stats[2] += targets.shape[0]
            if first_step and args.fail_on_rank == rank:
                emit(f"TORCHFLEET_FAIL rank={rank}: --fail-on-rank test hook, exiting with code 3", sys.stderr)
                sys.stdout.flush()
                # Not sys.exit: the interpreter's teardown with the process group's threads alive can abort
                # ("terminate called without an active exception", code 134) instead of exiting with 3.
                os._exit(3)
            first_step = False
            step += 1
            if time.monotonic() - marked >= 1.0:  # torchfleet's progress mark, at most once a second
                emit(f"TORCHFLEET_STEP {step}")
                marked = time.monotonic()
            if args.sleep > 0:
                time.sleep(args.sleep)
        dist.all_reduce(stats, op=dist.ReduceOp.SUM)  # global mean loss over all ranks
        epoch_time = time.perf_counter() - t0
        epoch_times.append(round(epoch_time, 4))
        losses.append((stats[0] / stats[1]).item())
        log(f"epoch {epoch + 1}/{args.epochs} loss={losses[-1]:.4f} time={epoch_time:.2f}s "
            f"samples_per_s={stats[2].item() / epoch_time:.1f}")
        if args.checkpoint_dir:
            t0 = time.perf_counter()
            train_state = {"epoch": epoch + 1, "losses": losses, "world_size": world_size,
                           "strategy": args.strategy, "shape": {k: getattr(args, k) for k in SHAPE_KEYS}}
            save_checkpoint(args.checkpoint_dir, epoch + 1, model, optimizer, train_state, rank)
            log(f"saved checkpoint {args.checkpoint_dir}/epoch-{epoch + 1} in {time.perf_counter() - t0:.2f}s")
            log(f"TORCHFLEET_CHECKPOINT epoch={epoch + 1}")  # complete: a run may grow to a node back now

    if rank == 0:
        result = {"world_size": world_size, "epochs": args.epochs, "losses": losses,
                  "checkpoint": args.checkpoint_dir, "resumed_from_epoch": resumed_from,
                  "saved_world_size": saved_world_size, "strategy": args.strategy, "epoch_times": epoch_times}
        emit("TORCHFLEET_RESULT " + json.dumps(result))
    # Tear down while every rank is still alive and the interpreter whole (see train.py: left to
    # the garbage collector at exit, a process group can die with a C++ abort).
    dist.barrier()
    del model, optimizer
    gc.collect()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
