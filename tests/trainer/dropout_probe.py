"""A training process whose task reports what dropout drew on its rank: `python dropout_probe.py probe [flags]`.

The real trainer (trainer.train.main) with one more task, `probe`: a linear model behind a
dropout of 0.5 whose every training step appends its mask to <PROBE_DIR>/masks-rank-<rank>.jsonl,
and whose initial weights (before DDP broadcasts rank 0's) go to <PROBE_DIR>/initial-rank-<rank>.pt.
With PROBE_SIGTERM_AT=<n>, rank 0 sends itself SIGTERM in its n-th training step, so a run stops
(with a checkpoint) at a step known in advance.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from trainer import train
from trainer.tasks.task import Task

FEATURES = 16


class MaskRecorder(nn.Module):
    def __init__(self, directory: Path, rank: int, sigterm_at: int):
        super().__init__()
        self.linear = nn.Linear(FEATURES, 2)
        self.dropout = nn.Dropout(0.5)
        self.masks = directory / f"masks-rank-{rank}.jsonl"
        self.sigterm_at = sigterm_at if rank == 0 else 0
        self.steps = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.steps += 1
            if self.steps == self.sigterm_at:
                os.kill(os.getpid(), signal.SIGTERM)
            kept = self.dropout(torch.ones_like(x)).ne(0)
            with open(self.masks, "a") as file:
                file.write(json.dumps(kept.int().flatten().tolist()) + "\n")
            x = x * kept
        return self.linear(x)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=256)


def make_task(args: argparse.Namespace) -> Task:
    directory, rank = Path(os.environ["PROBE_DIR"]), dist.get_rank()
    model = MaskRecorder(directory, rank, int(os.environ.get("PROBE_SIGTERM_AT", "0")))
    torch.save(model.state_dict(), directory / f"initial-rank-{rank}.pt")
    generator = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.samples, FEATURES, generator=generator)
    y = (x[:, 0] > 0).long()
    data = TensorDataset(x, y)
    return Task(model, data, data, lambda m, batch: (F.cross_entropy(m(batch[0]), batch[1]), batch[1].shape[0]),
                "samples", lambda m, d: torch.save(m.state_dict(), d / "model.pt"))  # fmt: skip


if __name__ == "__main__":
    train.TASKS["probe"] = sys.modules[__name__]
    train.TASK_DEFAULTS["probe"] = dict(batch=16, lr=1e-2, grad_clip=0.0, warmup_steps=0, weight_decay=0.0)
    sys.exit(train.main(sys.argv[1:]))
