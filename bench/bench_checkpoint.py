"""How long one checkpoint blocks the training loop, against one training step (a measurement, not a test).

Side by side in one process (world of 1, gloo, CPU, one thread), on one MLP sized so that its
weights and AdamW's two moments make about --state-mib of state:
  - one optimizer step of that model (forward, backward, AdamW) at --batch;
  - the synchronous save the trainer had before sharded checkpoints (kept here, only here, to compare):
    torch.save through a sha256, fsync, rename, then its JSON record; the loop waited for all of it;
  - the trainer's save (trainer.checkpoint.sharded.AsyncCheckpointer): what the loop waits for is
    the copy into CPU memory; the shards are written by a background thread while steps go on.
Usage: .venv/bin/python bench/bench_checkpoint.py [--state-mib 256] [--batch 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainer.checkpoint.record import CheckpointRecord  # noqa: E402
from trainer.checkpoint.store import CheckpointStore  # noqa: E402
from trainer.checkpoint.sharded import AsyncCheckpointer  # noqa: E402
from report import print_table  # noqa: E402  bench/report.py: the scripts run with bench/ on sys.path

WIDTH = 512  # input and output width; the hidden width makes up the size
RECORD = CheckpointRecord("bench", world_size=1, batch=32, grad_accum=1, schedule_samples=0, precision="fp32",
                          progress={"epoch": 0, "step_in_epoch": 0, "samples_in_epoch": 0, "samples_seen": 0}, scaler={})  # fmt: skip


def model_of(state_mib: int) -> nn.Module:
    params = state_mib * 2**20 // 12  # fp32 weights + AdamW's exp_avg and exp_avg_sq
    hidden = (params - WIDTH) // (2 * WIDTH + 1)
    return nn.Sequential(nn.Linear(WIDTH, hidden), nn.ReLU(), nn.Linear(hidden, WIDTH))


def step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: int) -> float:
    started = time.perf_counter()
    inputs, targets = torch.randn(batch, WIDTH), torch.randint(0, WIDTH, (batch,))
    F.cross_entropy(model(inputs), targets).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def synchronous_save(directory: Path, step_number: int, payload: dict) -> float:
    """The trainer's former checkpoint write, blocking: hashed torch.save, fsync, rename, record."""
    started = time.perf_counter()
    path = directory / f"ckpt-{step_number:08d}.pt"
    temp = path.with_name(f".{path.name}.tmp")
    sha, size = hashlib.sha256(), 0

    class Hashing:
        def __init__(self, file):
            self.file = file

        def write(self, data: bytes) -> int:
            nonlocal size
            sha.update(data)
            size += len(data)
            return self.file.write(data)

        def flush(self) -> None:
            self.file.flush()

    with open(temp, "wb") as file:
        torch.save(payload, Hashing(file))
        file.flush()
        os.fsync(file.fileno())
    os.replace(temp, path)
    with open(path.with_suffix(".json"), "w") as record:
        record.write(json.dumps({"step": step_number, "sha256": sha.hexdigest(), "bytes": size}))
        record.flush()
        os.fsync(record.fileno())
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-mib", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    model = model_of(args.state_mib)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step(model, optimizer, args.batch)  # AdamW's state exists from the first step on
    state_bytes = sum(t.nbytes for t in model.state_dict().values()) + sum(
        t.nbytes for s in optimizer.state.values() for t in s.values()
    )
    steps = [step(model, optimizer, args.batch) for _ in range(5)]
    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-") as tmp:
        old_dir = Path(tmp) / "old"
        old_dir.mkdir()
        old = [synchronous_save(old_dir, n, {"model": model.state_dict(), "optimizer": optimizer.state_dict()})
               for n in range(args.repeats)]  # fmt: skip
        store = CheckpointStore(Path(tmp) / "new", keep=2)
        checkpointer = AsyncCheckpointer(store, dist.new_group(backend="gloo"), True, pinned=False, timeout_s=600)
        blocked, written, during = [], [], []
        for n in range(args.repeats):
            started = time.perf_counter()
            model_state, optimizer_state = get_state_dict(model, optimizer)
            checkpointer.save(n, {"model": model_state, "optimizer": optimizer_state}, RECORD)
            blocked.append(time.perf_counter() - started)
            while checkpointer.writing():
                during.append(step(model, optimizer, args.batch))  # the loop goes on while the shards are written
            checkpointer.wait()
            written.append(time.perf_counter() - started)
        checkpointer.close()
        steps += [step(model, optimizer, args.batch) for _ in range(5)]
    dist.destroy_process_group()

    step_s, old_s, new_s = statistics.median(steps), statistics.median(old), statistics.median(blocked)
    rows = [
        ("state: model + AdamW moments", f"{state_bytes / 2**20:.0f} MiB"),
        (f"training step (batch {args.batch}), median of {len(steps)}", f"{step_s * 1e3:.1f} ms"),
        (f"synchronous save (old path), median of {len(old)}", f"{old_s * 1e3:.1f} ms"),
        (f"async sharded save, loop blocked, median of {len(blocked)}", f"{new_s * 1e3:.1f} ms"),
        ("async sharded save, written in the background, median", f"{statistics.median(written) * 1e3:.1f} ms"),
        (f"training step while a save is written, median of {len(during)}",
         f"{statistics.median(during) * 1e3:.1f} ms" if during else "none"),  # fmt: skip
        ("old save blocks the loop / training step", f"{old_s / step_s:.2f}"),
        ("async save blocks the loop / training step (goal <= 1.0)", f"{new_s / step_s:.2f}"),
    ]
    print_table(f"bench_checkpoint: {os.cpu_count()} CPUs, one thread, CPU/gloo, world of 1", rows)


if __name__ == "__main__":
    main()
