"""The record of the samples each rank trained (trainer/sample_record.py, `--sample-record DIR`), and what
it proves: across stops, kills and resizes of the world, every sample of an epoch was trained once."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainer_testing import (
    clean_env, done_lines, entrypoint_command, epoch_records, free_port, kill_tree, pod_env, resumed_lines, same_result,
    uninterrupted_result,
)  # fmt: skip

from trainer import contract as c
from trainer.sample_record import IndexedDataset, read_worlds, trained_samples
from trainer.sampler import EpochSampler
from trainer.tasks.lm.data import TokenBlocks
from trainer.tasks.lm.shards import Shard

# Smoke runs of a few seconds: a rank's step is 2 micro-batches of 32 samples (64), a world of 2 takes 128
# a step (31 steps an epoch, 32 samples left over), a world of 3 takes 192.
SAMPLES, SEED, PER_RANK_STEP = 4000, 11, 64
ARGS = [
    "-m", "trainer.train", "smoke", "--epochs", "2", "--samples", str(SAMPLES), "--batch", "32", "--grad-accum", "2",
    "--features", "512", "--hidden", "2048", "--lr", "1e-3", "--seed", str(SEED), "--checkpoint-every", "8",
    "--log-every", "4", "--pg-timeout", "60",
]  # fmt: skip


def epoch_order(epoch: int) -> list[int]:
    """The permutation of the training set the sampler gives `epoch` in every world."""
    sampler = EpochSampler(SAMPLES, 1, 0, SEED, PER_RANK_STEP)
    sampler.set_epoch(epoch)
    return sampler.order().tolist()


def assert_each_epoch_trained_once(trained: dict[int, list[int]], last_world_size: dict[int, int]) -> None:
    """Each epoch's ids are a prefix of its order, each once. Left out: the order's samples after the last
    whole step of the world that ended the epoch, fewer than that world takes in a step (its drop-last)."""
    assert sorted(trained) == [0, 1]
    for epoch, ids in trained.items():
        order = epoch_order(epoch)
        assert len(ids) == len(set(ids)), f"epoch {epoch}: a sample trained twice"
        assert ids == sorted(order[: len(ids)]), f"epoch {epoch}: not the order's first {len(ids)} samples"
        assert 0 <= SAMPLES - len(ids) < last_world_size[epoch] * PER_RANK_STEP, f"epoch {epoch}: {len(ids)} trained"


# --- the wrapper and the reader, in this process --------------------------------------------------
def test_indexed_batches_are_the_datasets_own_with_their_ids_through_a_worker(tmp_path):
    tokens = np.arange(5 * 9, dtype=np.uint16)  # the LM's samples: 5 blocks of seq_len 8 + 1
    tokens.tofile(tmp_path / "t.tokens")
    (tmp_path / "t.json").write_text(json.dumps({"format": 1, "count": len(tokens), "dtype": "uint16"}))
    smoke = TensorDataset(torch.randn(10, 3), torch.arange(10))
    for dataset in (smoke, TokenBlocks(Shard(tmp_path, "t"), seq_len=8)):
        indexed, plain = (list(DataLoader(data, batch_size=2, sampler=[4, 1, 3, 0], num_workers=1))
                          for data in (IndexedDataset(dataset), dataset))  # fmt: skip
        assert [ids.tolist() for ids, _ in indexed] == [[4, 1], [3, 0]]
        for (_, batch), expected in zip(indexed, plain, strict=True):
            assert type(batch) is type(expected)  # a list of tensors (the smoke task's), a tensor (the LM's)
            torch.testing.assert_close(batch, expected)


def write_record(directory, world: int, rank: int, world_size: int, resumed_at: int, steps: dict[int, list[int]],
                 epoch: int = 0, cut: str = "") -> None:  # fmt: skip
    """A rank's record as the trainer writes it, its last line cut to `cut` if given."""
    lines = [{"world": world, "rank": rank, "world_size": world_size, "resumed_at_step": resumed_at}]
    lines += [{"step": step, "epoch": epoch, "ids": ids} for step, ids in steps.items()]
    directory.mkdir(exist_ok=True)
    (directory / f"{world}-rank{rank}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines) + cut)


def test_a_later_world_that_resumed_earlier_drops_the_earlier_worlds_steps_it_never_reached(tmp_path):
    """12 samples, one per rank a step. A world of 2 trains steps 1-5 (samples 0-9) and is killed; its
    newest checkpoint is of step 2. A world of 4 resumes at step 2 (sample 4) and ends the epoch at
    step 4: step 5 of the first world was undone by the kill, though the second never had a step 5."""
    record = tmp_path / "record"
    for rank in (0, 1):
        cut = '{"step": 6, "epoch": 0, "ids": [1' if rank == 1 else ""  # a line the kill cut short
        write_record(record, 100, rank, 2, 0, {s: [2 * s - 2 + rank] for s in range(1, 6)}, cut=cut)
    for rank in range(4):
        write_record(record, 200, rank, 4, 2, {3: [4 + rank], 4: [8 + rank]})

    worlds = read_worlds(record)
    assert [(w.token, w.world_size, w.resumed_at_step, w.ranks) for w in worlds] == [
        (100, 2, 0, {0, 1}), (200, 4, 2, {0, 1, 2, 3}),
    ]  # fmt: skip
    assert max(step.step for step in worlds[0].steps) == 5 > max(step.step for step in worlds[1].steps)
    assert trained_samples(record) == {0: list(range(12))}  # keeping step 5 would count samples 8 and 9 twice


def test_a_world_resumed_from_scratch_drops_everything_before_it_and_epochs_are_kept_apart(tmp_path):
    record = tmp_path / "record"
    write_record(record, 1, 0, 1, 0, {1: [5], 2: [6]})  # killed before any checkpoint
    write_record(record, 2, 0, 1, 0, {1: [0], 2: [1]})
    write_record(record, 3, 0, 1, 2, {3: [2, 0]}, epoch=1)
    assert trained_samples(record) == {0: [0, 1], 1: [0, 2]}


def test_a_world_missing_a_ranks_record_or_with_a_broken_line_is_refused(tmp_path):
    record = tmp_path / "record"
    write_record(record, 1, 0, 2, 0, {1: [0]})
    with pytest.raises(ValueError, match=r"world 1 of 2 trained, but .* holds the record of ranks \[0\] only"):
        trained_samples(record)
    write_record(record, 1, 1, 2, 0, {1: [1]})
    assert trained_samples(record) == {0: [0, 1]}
    (record / "1-rank1.jsonl").write_text((record / "1-rank1.jsonl").read_text().replace('"ids"', "ids", 1))
    with pytest.raises(ValueError, match="1-rank1.jsonl: a whole line that is not JSON"):
        trained_samples(record)


# --- runs of real processes on loopback -----------------------------------------------------------
def start_world(spawn, tmp_path, name: str, nproc: int, record, args=ARGS):
    """A pod of `nproc` training processes (the entrypoint, torchrun) on the run tmp_path/run."""
    env = clean_env(**pod_env(f"{name}-0", free_port(), nnodes=1, nproc=nproc), OUT_DIR=str(tmp_path))
    return spawn(entrypoint_command([*args, "--sample-record", str(record)]), env, name)


def rank0_steps(record, world_index: int) -> list[tuple[int, int]]:
    """(global step, epoch) of each step rank 0 of the world_index-th world has recorded so far."""
    worlds = read_worlds(record) if record.exists() else []
    if len(worlds) <= world_index:
        return []
    return [(step.step, step.epoch) for step in worlds[world_index].steps if step.rank == 0]


def committed_checkpoints(run) -> list[int]:
    return sorted(int(path.name[5:13]) for path in (run / "checkpoints").glob("ckpt-*.json"))


@pytest.mark.timeout(300)
def test_an_uninterrupted_run_records_the_samplers_order_and_trains_what_it_would_without(tmp_path):
    args = [*ARGS, "--checkpoint-every", "0", "--workers", "1"]  # through a loader worker, with its prefetching
    plain, recorded = tmp_path / "plain", tmp_path / "recorded"
    for out in (plain, recorded):
        out.mkdir()
    expected = uninterrupted_result(args, plain)
    assert uninterrupted_result([*args, "--sample-record", str(recorded / "record")], recorded) == expected

    (world,) = read_worlds(recorded / "record")
    assert (world.world_size, world.resumed_at_step, world.ranks) == (2, 0, {0, 1})
    steps_per_epoch = SAMPLES // (2 * PER_RANK_STEP)
    # step by step, each rank's ids are the ones its sampler gives it, in its order
    for rank in (0, 1):
        mine = [step for step in world.steps if step.rank == rank]
        expected_steps = [(epoch * steps_per_epoch + i + 1, epoch) for epoch in (0, 1) for i in range(steps_per_epoch)]
        assert [(s.step, s.epoch) for s in mine] == expected_steps
        for epoch in (0, 1):
            sampler = EpochSampler(SAMPLES, 2, rank, SEED, PER_RANK_STEP)
            sampler.set_epoch(epoch)
            assert [i for s in mine if s.epoch == epoch for i in s.ids] == list(sampler)
    assert_each_epoch_trained_once(trained_samples(recorded / "record"), {0: 2, 1: 2})


@pytest.mark.timeout(300)
def test_a_run_resized_stopped_and_killed_trains_every_sample_of_each_epoch_once(spawn, tmp_path):
    """2 processes stopped by SIGTERM mid-epoch 0; 3 go on and are killed (SIGKILL, no checkpoint) in
    epoch 1, steps past their newest checkpoint; 2 resume from it and end the run. The record, not the
    trainer's report, shows each epoch's samples trained once, all but the drop-last remainder. (Epochs
    count from 0 here, as in the record; the logs' [TRAIN] and [STOP] lines count from 1.)"""
    record, run = tmp_path / "record", tmp_path / "run"
    first = start_world(spawn, tmp_path, "two", 2, record)
    first.wait_for(lambda _: len(rank0_steps(record, 0)) >= 2, 120, "the world of 2's second step")
    os.kill(first.pid, signal.SIGTERM)
    assert first.wait(60) == c.EXIT_TERMINATED, first.text()[-4000:]
    assert "[STOP] stopped by SIGTERM at epoch 1" in first.text(), first.text()[-4000:]

    def killable(_) -> bool:
        """Rank 0 of the world of 3 has recorded 2 steps of epoch 1 past a checkpoint written in it."""
        steps = [step for step, epoch in rank0_steps(record, 1) if epoch == 1]
        mid_epoch = [k for k in committed_checkpoints(run) if steps and k > steps[0]]
        return bool(mid_epoch) and steps[-1] >= mid_epoch[-1] + 2

    second = start_world(spawn, tmp_path, "three", 3, record)
    second.wait_for(killable, 120, "the world of 3 past a checkpoint in epoch 1")
    kill_tree(second.pid)  # the pod lost: entrypoint, torchrun and workers at once
    assert second.popen.wait(10) != 0

    third = start_world(spawn, tmp_path, "two-again", 2, record)
    assert third.wait(120) == 0, third.text()[-4000:]
    assert len(done_lines(third.text())) == 2

    worlds = read_worlds(record)
    assert [(w.world_size, w.ranks) for w in worlds] == [(2, {0, 1}), (3, {0, 1, 2}), (2, {0, 1})]
    for world, log in zip(worlds[1:], (second.text(), third.text())):
        (resumed,) = resumed_lines(log)
        assert resumed.startswith(f"[CKPT] resumed from ckpt-{world.resumed_at_step:08d}:"), resumed
    killed, last = worlds[1], worlds[2]
    undone = [s for s in killed.steps if s.step > last.resumed_at_step]
    assert undone, "the kill came after steps past the checkpoint the last world resumed from"
    # the last world resumed mid-epoch 1, from the world of 3's checkpoint
    assert worlds[0].resumed_at_step == 0 and killed.resumed_at_step < last.resumed_at_step
    assert {s.epoch for s in last.steps} == {1}

    trained = trained_samples(record)
    # the world of 3 ended epoch 0 (it took over from the world of 2 mid-epoch), the world of 2 epoch 1
    assert_each_epoch_trained_once(trained, {0: 3, 1: 2})
    # the undone steps' samples were trained again by the last world, and count once
    assert {i for s in undone for i in s.ids} <= set(trained[1])
    assert [r["samples"] for r in epoch_records(run)] == [len(trained[0]), len(trained[1])], "the trainer's own report agrees"
    assert same_result(done_lines(third.text())[0]) == same_result(done_lines(third.text())[1])
