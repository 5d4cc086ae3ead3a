"""Checkpoints are complete or ignored: unrecorded, torn and old-format ones are never taken for whole ones."""

from __future__ import annotations

import builtins
import io
import json
import os
from dataclasses import replace

import pytest

from trainer.checkpoint.digests import crc32_of, share_of
from trainer.checkpoint.record import FORMAT, CheckpointRecord
from trainer.checkpoint.store import CheckpointStore, UnreadableFormat

pytestmark = pytest.mark.timeout(60)


def write_shards(store: CheckpointStore, step: int) -> None:
    """What torch.distributed.checkpoint leaves in a checkpoint's directory, as far as the store cares."""
    shards = store.shards_of(step)
    shards.mkdir(parents=True)
    for rank in (0, 1):
        (shards / f"__{rank}_0.distcp").write_bytes(bytes([step, rank]) * (100 + step))
    (shards / ".metadata").write_bytes(b"metadata")


def record(reason: str = "periodic") -> CheckpointRecord:
    progress = {"epoch": 1, "step_in_epoch": 2, "samples_in_epoch": 128, "samples_seen": 512}
    return CheckpointRecord(reason, world_size=2, batch=32, grad_accum=1, schedule_samples=1024, precision="fp32",
                            progress=progress, scaler={})  # fmt: skip


@pytest.fixture
def store(tmp_path) -> CheckpointStore:
    store = CheckpointStore(tmp_path / "checkpoints", keep=3)
    for step in (10, 20, 30):
        write_shards(store, step)
        store.commit(step, record())
    return store


def test_keeps_the_newest_k(store):
    write_shards(store, 40)
    store.commit(40, record())
    assert sorted(p.name for p in store.directory.iterdir()) == [
        "ckpt-00000020", "ckpt-00000020.json", "ckpt-00000030", "ckpt-00000030.json", "ckpt-00000040", "ckpt-00000040.json",
    ]  # fmt: skip


def test_the_record_lists_every_file_with_its_size(store):
    found = store.newest_complete()
    assert (found.step, found.name, found.record.format, found.record.reason) == (30, "ckpt-00000030", FORMAT, "periodic")
    assert found.record.files == {".metadata": 8, "__0_0.distcp": 260, "__1_0.distcp": 260}
    assert found.record == replace(record(), step=30, files=found.record.files), "the record reads back as it was written"
    written = json.loads((store.directory / "ckpt-00000030.json").read_text())
    assert (written["epoch"], written["samples_in_epoch"], written["step"]) == (1, 128, 30), "where the run stood, for readers"


def test_a_checkpoint_without_its_record_does_not_count_and_is_cleaned_up(store):
    write_shards(store, 40)  # a writer died before the record
    assert store.newest_complete().step == 30
    store.remove_incomplete()
    assert not store.shards_of(40).exists() and store.shards_of(30).exists()


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_a_torn_shard_falls_back_to_the_checkpoint_before(store, damage):
    shard = store.shards_of(30) / "__1_0.distcp"
    if damage == "truncate":
        os.truncate(shard, 100)
    else:
        shard.unlink()
    assert store.newest_complete().step == 20
    assert store.newest_complete(older_than=20).step == 10


def test_an_unreadable_record_falls_back(store):
    (store.directory / "ckpt-00000030.json").write_text('{"format": 3, "fi')
    assert store.newest_complete().step == 20


def test_the_newest_complete_checkpoint_is_found_without_opening_an_older_one(store, monkeypatch):
    """Older checkpoints made unreadable: whatever touches them fails, and nothing does."""
    older = [str(store.directory / name) for name in ("ckpt-00000010", "ckpt-00000020")]
    touched = []

    def guard(real):
        def guarded(path, *args, **kwargs):
            if any(os.fspath(path).startswith(prefix) for prefix in older):
                touched.append(os.fspath(path))
                raise PermissionError(13, "unreadable", os.fspath(path))
            return real(path, *args, **kwargs)

        return guarded

    monkeypatch.setattr(builtins, "open", guard(builtins.open))
    monkeypatch.setattr(io, "open", guard(io.open))
    monkeypatch.setattr(os, "stat", guard(os.stat))
    found = store.newest_complete()
    monkeypatch.undo()
    assert found.step == 30 and touched == []


def test_an_old_single_file_checkpoint_is_refused_with_the_way_out(tmp_path):
    store = CheckpointStore(tmp_path / "checkpoints", keep=3)
    store.directory.mkdir()
    (store.directory / "ckpt-00000008.pt").write_bytes(b"torch.save payload")
    old_record = {"step": 8, "file": "ckpt-00000008.pt", "sha256": "0" * 64, "bytes": 18}
    (store.directory / "ckpt-00000008.json").write_text(json.dumps(old_record))
    with pytest.raises(UnreadableFormat, match=r"ckpt-00000008.json is a checkpoint of format 2; this trainer reads format 3.*move"):
        store.newest_complete()


def test_empty_directory_has_nothing_to_resume(tmp_path):
    assert CheckpointStore(tmp_path / "none", keep=1).newest_complete() is None


def test_keep_must_be_at_least_one(tmp_path):
    with pytest.raises(ValueError, match="--keep-checkpoints 0"):
        CheckpointStore(tmp_path, keep=0)


def test_a_record_as_the_untyped_writer_wrote_it_still_counts(store):
    """Checkpoints written before the record was typed resume: the same JSON, key for key."""
    write_shards(store, 50)
    files = {p.name: p.stat().st_size for p in sorted(store.shards_of(50).iterdir())}
    progress = {"epoch": 2, "step_in_epoch": 0, "global_step": 50, "samples_in_epoch": 0, "samples_seen": 3200}
    (store.directory / "ckpt-00000050.json").write_text(json.dumps({
        "reason": "epoch end", "epoch": 2, "step_in_epoch": 0, "samples_in_epoch": 0, "samples_seen": 3200,
        "world_size": 2, "batch": 32, "grad_accum": 1, "schedule_samples": 6400, "precision": "fp32",
        "progress": progress, "scaler": {}, "format": 3, "step": 50, "files": files,
    }))  # fmt: skip
    found = store.newest_complete()
    assert (found.step, found.record.reason, found.record.world_size, found.record.progress) == (50, "epoch end", 2, progress)


@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
def test_the_ranks_share_the_digests_each_file_read_once(world_size):
    names = [f"__{rank}_0.distcp" for rank in range(4)] + [".metadata"]
    shares = [share_of(names, rank, world_size) for rank in range(world_size)]
    assert sorted(name for share in shares for name in share) == sorted(names)


def test_a_digest_changes_with_one_flipped_bit_at_the_same_size(tmp_path):
    path = tmp_path / "shard"
    path.write_bytes(bytes(range(256)) * 40000)  # more than one read's chunk
    before = crc32_of(path)
    with open(path, "r+b") as file:
        file.seek(9_000_000)
        byte = file.read(1)[0]
        file.seek(9_000_000)
        file.write(bytes([byte ^ 0x01]))
    assert crc32_of(path) != before and len(before) == 8
