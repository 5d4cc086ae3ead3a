"""What rank 0's log lines say: the figures of a `[TRAIN]` line, an epoch's end, a checkpoint saved,
a world re-formed, the result. The lines' formats are the trainer's (trainer/loop.py, entrypoint)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Optional

from trainer.console import fields

TRAIN, EPOCH, DONE = "[TRAIN]", "[EPOCH]", "[DONE]"
SAVED = re.compile(r"\[CKPT\] saved (ckpt-(\d+))")
RESUMED, SCRATCH = "[CKPT] resumed from", "[CKPT] no checkpoint"
REJOIN, STOPPED = "[DDP] re-joining", "[STOP]"
HANG = "[HANG]"  # the hang watch's verdict (trainer/hang_watch.py), from the lowest rank not to blame
RENDEZVOUS_STARTED, RENDEZVOUS_DONE = "[DDP] torchrun ", "[DDP] process "
PREFLIGHT_WAIT = "[PREFLIGHT] waiting for"


@dataclass(frozen=True)
class TrainFigures:
    epoch: int
    epochs: int
    step: int
    steps: int
    global_step: int
    loss: float
    rate: float
    unit: str  # samples or tokens

    @classmethod
    def parse(cls, line: str) -> Optional["TrainFigures"]:
        if not line.startswith(TRAIN):
            return None
        found = fields(line)
        epoch, epochs = found["epoch"].split("/")
        step, steps = found["step"].split("/")
        unit, rate = next((k[:-2], v) for k, v in found.items() if k.endswith("/s"))
        return cls(int(epoch), int(epochs), int(step), int(steps), int(found["global_step"]), float(found["loss"]),
                   float(rate), unit)  # fmt: skip

    @property
    def steps_left(self) -> int:
        """Optimizer steps until the run's end."""
        return (self.epochs - self.epoch) * self.steps + self.steps - self.step


@dataclass(frozen=True)
class Checkpoint:
    name: str
    step: int
    saved_at: Optional[datetime]  # from the log's timestamp, when the log has them


def checkpoint_saved(line: str) -> Optional[tuple[str, int]]:
    """(name, global step) of a `[CKPT] saved` line."""
    match = SAVED.match(line)
    return (match.group(1), int(match.group(2))) if match else None


def split_timestamp(line: str) -> tuple[Optional[datetime], str]:
    """A `kubectl logs --timestamps` line as (its time, its text)."""
    stamp, _, text = line.partition(" ")
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")), text
    except ValueError:
        return None, line


def newest_checkpoint(timestamped_log: str) -> Optional[Checkpoint]:
    found = None
    for row in timestamped_log.splitlines():
        at, text = split_timestamp(row)
        if saved := checkpoint_saved(text):
            found = Checkpoint(saved[0], saved[1], at)
    return found


def last_line(log: str, tag: str) -> Optional[str]:
    rows = [row for row in log.splitlines() if row.startswith(tag)]
    return rows[-1] if rows else None
