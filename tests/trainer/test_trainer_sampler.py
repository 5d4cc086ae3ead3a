"""The epoch's sample order across a change of world size (trainer/sampler.py)."""

from __future__ import annotations

import pytest
from torch.utils.data import DistributedSampler

from trainer.sampler import EpochSampler

SIZE, SEED, PER_STEP = 1000, 7, 6  # PER_STEP: micro-batch 3 x accumulation 2


def taken(world_size: int, steps: int, epoch: int, start: int) -> list[int]:
    """What a world takes in `steps` optimizer steps from `start`, in the order the steps consume it."""
    shards = []
    for rank in range(world_size):
        sampler = EpochSampler(SIZE, world_size, rank, SEED, PER_STEP)
        sampler.set_epoch(epoch, start)
        shards.append(list(sampler)[: steps * PER_STEP])
    # step s: every rank's s-th slice; within a step, sample i of rank r is the order's (i * world + r)-th
    return [shard[i] for step in range(steps) for i in range(step * PER_STEP, (step + 1) * PER_STEP) for shard in shards]


def test_a_world_takes_a_prefix_of_the_epochs_order():
    order = EpochSampler(SIZE, 1, 0, SEED, PER_STEP)
    order.set_epoch(3)
    assert sorted(taken(4, 10, epoch=3, start=0)) == sorted(order.order()[: 4 * PER_STEP * 10].tolist())


@pytest.mark.parametrize("before, after", [(2, 3), (3, 2), (4, 1)])
def test_a_resized_world_goes_on_at_the_exact_sample(before, after):
    steps_before = 17
    first = taken(before, steps_before, epoch=1, start=0)
    resumed_at = len(first)  # what the checkpoint records: samples taken by the whole world
    sampler = EpochSampler(SIZE, after, 0, SEED, PER_STEP)
    sampler.set_epoch(1, resumed_at)
    second = taken(after, sampler.steps_left(), epoch=1, start=resumed_at)

    seen = first + second
    assert len(seen) == len(set(seen)), "a sample was trained twice across the resize"
    assert sorted(seen) == sorted(sampler.order()[: len(seen)].tolist()), "a sample was skipped across the resize"
    # the epoch ends when the new world cannot fill one more step
    assert SIZE - len(seen) < after * PER_STEP


def test_an_unresized_world_sees_what_distributed_sampler_gives_it():
    for rank in range(3):
        ours = EpochSampler(SIZE, 3, rank, SEED, PER_STEP)
        ours.set_epoch(2)
        theirs = DistributedSampler(range(SIZE), num_replicas=3, rank=rank, shuffle=True, seed=SEED, drop_last=True)
        theirs.set_epoch(2)
        assert list(ours) == list(theirs)[: len(ours)]


def test_a_start_beyond_the_epoch_is_refused():
    with pytest.raises(ValueError, match="outside an epoch of 1000 samples"):
        EpochSampler(SIZE, 2, 0, SEED, PER_STEP).set_epoch(0, SIZE + 1)
