"""Where a run stands, in steps and samples, and the bookkeeping of an epoch: its schedule, its losses, its end.

A checkpoint keeps `Progress` whole (its fields, by name), so that a resume, of the same world or of a
resized one, goes on at the exact sample and learning rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass
class Progress:
    epoch: int = 0  # epochs completed
    step_in_epoch: int = 0  # optimizer steps completed in the current epoch
    global_step: int = 0
    samples_in_epoch: int = 0  # taken by the whole world this epoch: where a world of any size goes on
    samples_seen: int = 0  # over all epochs: where the learning-rate schedule stands
    # The schedule in samples, fixed when the run starts, so that a resized world continues it;
    # its length follows --epochs (a run given more epochs stretches it).
    warmup_samples: int = 0
    epoch_samples: int = 0  # what an epoch trains: whole steps of the world that started the run
    epoch_loss_sum: float = 0.0  # summed over all ranks, for the epoch's mean train loss
    epoch_units: float = 0.0
    best_val_loss: float = math.inf
    best_epoch: int = 0  # 1-based; 0: none yet
    last_train_loss: float = math.nan  # of the last completed epoch, for a restart that finds the run done

    def lr_factor(self, world_step: int, epochs: int, min_lr_ratio: float) -> float:
        """Linear warmup, then cosine down to min_lr_ratio, over the samples the run has seen."""
        if self.samples_seen < self.warmup_samples:
            return (self.samples_seen + world_step) / self.warmup_samples
        done = (self.samples_seen - self.warmup_samples) / max(1, epochs * self.epoch_samples - self.warmup_samples)
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, done)))

    def step_done(self, world_step: int) -> None:
        """The world took one optimizer step, of `world_step` samples."""
        self.step_in_epoch += 1
        self.global_step += 1
        self.samples_in_epoch += world_step
        self.samples_seen += world_step

    def add_losses(self, loss_sum: float, units: float) -> None:
        """A log interval's losses, summed over the world, toward the epoch's mean train loss."""
        self.epoch_loss_sum += loss_sum
        self.epoch_units += units

    def end_epoch(self, val_loss: float) -> EpochEnd:
        """Close the epoch just trained: its mean train loss, whether its model is the best yet; the next starts at 0."""
        epoch, train_loss = self.epoch + 1, self.epoch_loss_sum / self.epoch_units
        improved = val_loss < self.best_val_loss
        if improved:
            self.best_val_loss, self.best_epoch = val_loss, epoch
        end = EpochEnd(epoch, self.global_step, self.samples_in_epoch, train_loss, val_loss, improved, self.best_epoch)
        self.epoch, self.step_in_epoch, self.samples_in_epoch, self.epoch_loss_sum, self.epoch_units = epoch, 0, 0, 0.0, 0.0
        self.last_train_loss = train_loss
        return end


@dataclass(frozen=True)
class EpochEnd:
    epoch: int  # 1-based: the epoch just completed
    global_step: int
    samples: int  # what the world trained of it
    train_loss: float
    val_loss: float
    improved: bool  # the lowest validation loss so far: its model becomes `best`
    best_epoch: int

    def metrics(self, unit: str, units: float, seconds: float) -> dict[str, Any]:
        """The epoch's record, in metrics.jsonl and its directory's metrics.json."""
        return {"epoch": self.epoch, "global_step": self.global_step, "samples": self.samples, "train_loss": self.train_loss,
                "val_loss": self.val_loss, "val_ppl": perplexity(self.val_loss), f"{unit}_per_s": round(units / seconds, 1),
                "seconds": round(seconds, 3), "best_epoch": self.best_epoch}  # fmt: skip

    def summary(self) -> dict[str, Any]:
        return run_summary(self.epoch, self.train_loss, self.val_loss, self.best_epoch)


def run_summary(epochs: int, train_loss: float, val_loss: float, best_epoch: int) -> dict[str, Any]:
    """What the [DONE] line says of the training: its last epoch's losses and the best epoch."""
    return {"epochs": epochs, "train_loss": train_loss, "val_loss": val_loss, "val_ppl": perplexity(val_loss),
            "best": f"epoch-{best_epoch}"}  # fmt: skip


def perplexity(loss: float) -> float:
    return math.exp(loss) if loss < 50 else math.inf
