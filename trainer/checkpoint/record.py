"""A checkpoint's commit record: what an exact resume needs besides the shards, in a world of any size.

Rank 0 alone writes and reads it (trainer/checkpoint/store.py), so no shard holds it. The JSON also
carries where the run stood (epoch, step in the epoch, samples) at its top level, for a person or a
tool reading the checkpoint directory.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

FORMAT = 3  # 3: sharded directories (torch.distributed.checkpoint); 2 was one torch.save file per step
# Copied to the top level of the JSON from the loop's progress, for readers; never read back.
_WHERE = ("epoch", "step_in_epoch", "samples_in_epoch", "samples_seen")


class CheckpointReason(StrEnum):
    """Why a checkpoint was written: in its record, its `[CKPT]` lines, and the resume that reads it."""

    # every --checkpoint-every optimizer steps (an epoch's last step is left to its end)
    PERIODIC = "periodic"
    # --checkpoint-every-seconds since the last one, by rank 0's clock
    TIME = "time"
    # an epoch ended; the last one is the run's final state
    EPOCH_END = "epoch end"
    # a SIGTERM stopped the world where it was: a resume from it trains nothing twice
    SIGTERM = "sigterm"


@dataclass(frozen=True)
class CheckpointRecord:
    reason: str  # a CheckpointReason; a plain string once read back from JSON
    world_size: int  # of the world that wrote it: another size cannot replay its ranks' random streams
    batch: int  # per process and micro-batch
    grad_accum: int
    schedule_samples: int  # the learning-rate schedule's length, in samples
    precision: str  # bf16, fp16 or fp32
    progress: dict[str, Any]  # the loop's Progress, field by field
    scaler: dict[str, Any]  # fp16's loss scaler; empty in bf16 and fp32
    step: int = 0  # the global step: set by the store when it commits
    files: dict[str, int] = field(default_factory=dict)  # each shard file and its size: set by the store
    # each file's CRC-32 (trainer/checkpoint/digests.py): set by the store; none in records of trainers before it
    digests: dict[str, str] = field(default_factory=dict)
    format: int = FORMAT

    def to_json(self) -> dict[str, Any]:
        where = {name: self.progress[name] for name in _WHERE}
        return {"reason": self.reason, **where, **{k: v for k, v in dataclasses.asdict(self).items() if k != "reason"}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CheckpointRecord":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in names})
