"""Which samples each rank trains on: one order per epoch, shared by every world size.

An epoch's order is a permutation of the whole training set that depends on the seed and the
epoch only (the one DistributedSampler draws). The samples trained so far are always a prefix of
it, `start` long, counted over all ranks and recorded in the checkpoint. Each rank takes every
world_size-th sample of the rest, and only as many as fill whole steps of the whole world. So a
world of another size resumes at the exact sample where the old one stopped: across a resize no
sample of the epoch is skipped or seen twice. (DistributedSampler instead shards the permutation
by world size first, so a skip counted in steps lands elsewhere in a world of another size.)
"""

from __future__ import annotations

from typing import Iterator

import torch
from torch.utils.data import Sampler


class EpochSampler(Sampler[int]):
    def __init__(self, dataset_size: int, world_size: int, rank: int, seed: int, samples_per_step: int):
        """samples_per_step: what one rank takes per optimizer step (micro-batch x accumulation)."""
        self.dataset_size, self.world_size, self.rank, self.seed = dataset_size, world_size, rank, seed
        self.samples_per_step = samples_per_step
        self.epoch, self.start = 0, 0

    @property
    def world_step(self) -> int:
        """Samples the whole world takes per optimizer step."""
        return self.world_size * self.samples_per_step

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Start `epoch` after its first `start` samples (taken by this or an earlier world)."""
        if not 0 <= start <= self.dataset_size:
            raise ValueError(f"start {start} is outside an epoch of {self.dataset_size} samples")
        self.epoch, self.start = epoch, start

    def steps_after(self, start: int) -> int:
        """Whole steps of this world in an epoch after its first `start` samples; the remainder is
        dropped, as with drop_last."""
        return (self.dataset_size - start) // self.world_step

    def steps_left(self) -> int:
        """Whole steps of this world left in the epoch set by set_epoch."""
        return self.steps_after(self.start)

    def order(self) -> torch.Tensor:
        """The epoch's permutation of the whole training set, the same in every world."""
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return torch.randperm(self.dataset_size, generator=generator)

    def __iter__(self) -> Iterator[int]:
        rest = self.order()[self.start:]
        return iter(rest[self.rank :: self.world_size][: len(self)].tolist())

    def __len__(self) -> int:
        return self.steps_left() * self.samples_per_step
