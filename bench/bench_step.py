"""Benchmark of the trainer's step against the floor, a bare DDP loop (a measurement, not a test).

Side by side in one process, world size 1 (gloo, CPU, one thread), the smoke task's model and batch
(seed 001's shape: 128 features, 256 hidden, 4 classes, batch 256), the same data:
  - trainer: Trainer._train_epoch, the loop `python -m trainer.train smoke` runs (learning-rate
    schedule, AMP choice, loss scaler, DDP, the figures synced every --log-every steps, [TRAIN] lines);
  - floor: `for x, y in DataLoader(shuffle=True)`: forward, loss, backward, AdamW step, zero_grad,
    under a plain DDP wrapper.
Epochs of the two alternate (interleaved, so drift on a shared machine hits both alike); the figure
is the median step time over the rounds, and the overhead is trainer / floor (goal: at most 1.10).
Usage: nice .venv/bin/python bench/bench_step.py [--rounds 21] [--samples 16384]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer import distributed, train  # noqa: E402
from trainer.tasks import smoke  # noqa: E402
from trainer.loop import Trainer  # noqa: E402
from trainer.outputs import RunDir  # noqa: E402
from trainer.stop import StopRequest  # noqa: E402

SMOKE = ["smoke", "--batch", "256", "--features", "128", "--hidden", "256", "--classes", "4", "--lr", "3e-3",
         "--seed", "42", "--checkpoint-every", "0", "--log-every", "10", "--device", "cpu"]  # fmt: skip


def trainer_epoch(trainer: Trainer) -> float:
    """Seconds per step of one epoch of the trainer's own loop."""
    trainer.progress.step_in_epoch = trainer.progress.samples_in_epoch = 0  # the same epoch again
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # its [TRAIN] lines: printed, not shown
        trainer._train_epoch()
    return (time.perf_counter() - started) / trainer.progress.step_in_epoch


class Floor:
    """The least a DDP training step can do: no schedule, no scaler, no figures."""

    def __init__(self, model, dataset, batch: int, lr: float, seed: int):
        self.ddp = DistributedDataParallel(model)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        self.loader = DataLoader(dataset, batch, shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(seed))

    def epoch(self) -> float:
        started, steps = time.perf_counter(), 0
        for x, y in self.loader:
            F.cross_entropy(self.ddp(x), y).backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            steps += 1
        return (time.perf_counter() - started) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=21, help="epochs of each, interleaved (the first is warm-up)")
    parser.add_argument("--samples", type=int, default=16384, help="training samples: an epoch is samples / 256 steps")
    options = parser.parse_args()
    torch.set_num_threads(1)
    d = distributed.init("cpu", 600)
    with tempfile.TemporaryDirectory(prefix="bench-step-") as tmp:
        args = train.parse_args([*SMOKE, "--samples", str(options.samples), "--out-dir", tmp])
        torch.manual_seed(args.seed)
        task = smoke.make_task(args)
        floor = Floor(copy.deepcopy(task.model), task.train_set, args.batch, args.lr, args.seed)
        trainer = Trainer(task, d, train.config_of(args), RunDir(Path(tmp) / "bench"), StopRequest(), "bench")
        trainer.step.ddp.train()
        trainer_s, floor_s = [], []
        for _ in range(options.rounds):
            trainer_s.append(trainer_epoch(trainer))
            floor_s.append(floor.epoch())
    dist.destroy_process_group()
    trainer_ms, floor_ms = statistics.median(trainer_s[1:]) * 1e3, statistics.median(floor_s[1:]) * 1e3
    steps = options.samples // args.batch
    print(f"bench_step: smoke MLP 128-256-4, batch 256, world size 1 (CPU, gloo, 1 thread), {steps} steps an epoch, "
          f"median of {options.rounds - 1} interleaved epochs each (1 warm-up)")  # fmt: skip
    print(f"  trainer step (Trainer._train_epoch)   {trainer_ms:8.3f} ms")
    print(f"  floor step (bare DDP loop)            {floor_ms:8.3f} ms")
    print(f"  overhead, trainer / floor (goal <= 1.10)  {trainer_ms / floor_ms:.3f}")


if __name__ == "__main__":
    main()
