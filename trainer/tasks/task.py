"""What the training loop needs from a workload: a model, its data, its loss, how to save it; and what a
user's task factory is given to make one (docs/trainer.md, "Bring your own model")."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.data import Dataset

from trainer.tasks.options import TaskOptions


@dataclass
class Task:
    model: nn.Module
    train_set: Dataset
    val_set: Dataset
    # (model, batch on device) -> mean loss over the batch's units, and how many units it held
    loss: Callable[[nn.Module, Any], tuple[torch.Tensor, int]]
    unit: str  # what throughput counts: "samples" or "tokens"
    save: Callable[[nn.Module, Path], None]
    # Written beside each saved model with its architecture (trainer.load): what else its user needs to
    # know, such as the task that trained it and the tokenizer its token ids belong to.
    card: dict[str, Any] = field(default_factory=dict)
    # Training FLOPs (forward and backward) per unit, for MFU (trainer/flops.py); None: not known, no MFU.
    flops_per_unit: float | None = None


@dataclass(frozen=True)
class TaskContext:
    """What `factory(context) -> Task` is given: build the data from `seed` (never from the rank or
    unseeded randomness), so that every rank and every restart sees the same samples."""

    options: TaskOptions  # --task-option KEY=VALUE, read with a type and a default
    seed: int  # the run's --seed; torch's generator is already seeded with it, so the model's weights are too
    data_dir: Path  # the datasets claim's mount (DATA_DIR, /data)


def set_epoch(dataset: Any, epoch: int) -> None:
    """Tells a dataset with a `set_epoch` method which epoch it is about to be read in (0-based)."""
    if hasattr(dataset, "set_epoch"):
        dataset.set_epoch(epoch)


def to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    return type(batch)(to_device(item, device) for item in batch)


def save_state_dict(model: nn.Module, directory: Path) -> None:
    torch.save(model.state_dict(), directory / "model.pt")
