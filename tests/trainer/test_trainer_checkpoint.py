"""Checkpoints are complete or ignored: partial, corrupt and half-written newest ones fall back."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import textwrap

import pytest
import torch
from trainer_testing import PYTHON, REPO, clean_env

from trainer.checkpoint import CheckpointStore

pytestmark = pytest.mark.timeout(60)


def payload(step: int) -> dict:
    generator = torch.Generator().manual_seed(step)
    return {"weights": torch.randn(64, 64, generator=generator), "step": step, "python_rng": random.getstate()}


@pytest.fixture
def store(tmp_path) -> CheckpointStore:
    store = CheckpointStore(tmp_path / "checkpoints", keep=3)
    for step in (10, 20, 30):
        store.save(step, payload(step), {"epoch": 0})
    return store


def test_keeps_the_newest_k(store):
    store.save(40, payload(40), {"epoch": 1})
    assert [step for step, _ in store.complete()] == [40, 30, 20]
    assert sorted(p.name for p in store.directory.iterdir()) == [
        "ckpt-00000020.json", "ckpt-00000020.pt", "ckpt-00000030.json", "ckpt-00000030.pt",
        "ckpt-00000040.json", "ckpt-00000040.pt",
    ]  # fmt: skip


def test_loads_the_newest_with_everything_in_it(store):
    path, state = store.load_newest()
    assert path.name == "ckpt-00000030.pt"
    assert torch.equal(state["weights"], payload(30)["weights"])
    random.setstate(state["python_rng"])  # RNG states survive the safe (weights_only) loader


def test_a_truncated_newest_checkpoint_falls_back_to_the_one_before(store):
    newest = store.directory / "ckpt-00000030.pt"
    newest.write_bytes(newest.read_bytes()[:1000])
    path, state = store.load_newest()
    assert (path.name, state["step"]) == ("ckpt-00000020.pt", 20)


def test_a_corrupt_byte_is_caught_by_the_hash(store):
    newest = store.directory / "ckpt-00000030.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    assert store.load_newest()[1]["step"] == 20


def test_a_checkpoint_without_its_commit_record_does_not_count(store):
    (store.directory / "ckpt-00000030.json").unlink()
    assert store.load_newest()[1]["step"] == 20


def test_a_record_whose_file_is_unloadable_falls_back(store):
    # the hash matches (the record was made for these bytes) but torch cannot read them
    junk = b"not a torch file"
    (store.directory / "ckpt-00000030.pt").write_bytes(junk)
    record = {"file": "ckpt-00000030.pt", "bytes": len(junk), "sha256": hashlib.sha256(junk).hexdigest()}
    (store.directory / "ckpt-00000030.json").write_text(json.dumps(record))
    assert [step for step, _ in store.complete()][0] == 30
    assert store.load_newest()[1]["step"] == 20


def test_empty_directory_has_nothing_to_resume(tmp_path):
    assert CheckpointStore(tmp_path / "none", keep=1).load_newest() is None


def test_a_crash_in_the_middle_of_writing_leaves_the_previous_checkpoint_loadable(tmp_path):
    """A real process dies (SIGKILL) after torch.save has written part of checkpoint 2."""
    script = textwrap.dedent(
        f"""
        import os, signal, torch
        from pathlib import Path
        from trainer import checkpoint
        store = checkpoint.CheckpointStore(Path({str(tmp_path / "ckpt")!r}), keep=3)
        store.save(1, {{"weights": torch.ones(256, 256), "step": 1}}, {{}})
        write = checkpoint._HashingWriter.write
        def write_then_die(self, data):
            write(self, data)
            if self.size > 100_000:
                self.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            return len(data)
        checkpoint._HashingWriter.write = write_then_die
        store.save(2, {{"weights": torch.zeros(512, 512), "step": 2}}, {{}})
        print("unreachable")
        """
    )
    result = subprocess.run([PYTHON, "-c", script], env=clean_env(), cwd=REPO, capture_output=True, timeout=60)
    assert result.returncode == -9, result.stderr.decode()
    leftovers = [p.name for p in (tmp_path / "ckpt").iterdir() if ".tmp-" in p.name]
    assert leftovers and all(p.startswith(".ckpt-00000002.pt") for p in leftovers), "the crash left its temp file"

    store = CheckpointStore(tmp_path / "ckpt", keep=3)
    path, state = store.load_newest()
    assert (path.name, state["step"]) == ("ckpt-00000001.pt", 1)
    assert torch.equal(state["weights"], torch.ones(256, 256))
    store.save(3, {"step": 3}, {})
    assert not [p for p in store.directory.iterdir() if ".tmp-" in p.name], "the next save cleans the leftovers"
