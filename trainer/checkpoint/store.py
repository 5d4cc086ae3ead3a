"""Where checkpoints live, and which of them count: complete ones only.

A checkpoint of global step N is two things in the run's checkpoint directory:
  ckpt-<N>/       what torch.distributed.checkpoint wrote: one shard file per rank and .metadata
  ckpt-<N>.json   its commit record (trainer/checkpoint/record.py), written by rank 0 after every
                  rank's shard is on disk
The record is written to a temp file, fsynced and renamed, so it is whole or absent; it lists
every file of the directory with its size and its CRC-32. A directory without its record (a writer
killed mid-way) or with a file of another size is not a checkpoint: resume passes over it to the one
before, as it does over one whose digests differ (checked by the ranks together:
trainer/checkpoint/run_checkpoints.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from trainer import console
from trainer.checkpoint.durable import fsync_directory, write_text_atomically
from trainer.checkpoint.record import FORMAT, CheckpointRecord

_RECORD = re.compile(r"^ckpt-(?P<step>[0-9]{8,})\.json$")
_SHARDS = re.compile(r"^ckpt-(?P<step>[0-9]{8,})$")
_TEMP_MARK = ".tmp-"


class UnreadableFormat(Exception):
    """The newest commit record was written by a trainer with another checkpoint format."""


@dataclass(frozen=True)
class Checkpoint:
    step: int
    directory: Path  # the shards
    record: CheckpointRecord

    @property
    def name(self) -> str:
        return self.directory.name


class CheckpointStore:
    def __init__(self, directory: Path, keep: int):
        if keep < 1:
            raise ValueError(f"--keep-checkpoints {keep}: keep at least one checkpoint")
        self.directory = Path(directory)
        self.keep = keep

    def shards_of(self, step: int) -> Path:
        return self.directory / f"ckpt-{step:08d}"

    def commit(self, step: int, record: CheckpointRecord, digests: dict[str, str] | None = None) -> Checkpoint:
        """Make checkpoint `step` count: its shards are all written (and read back into `digests`).
        Rank 0 calls it, then prunes."""
        shards = self.shards_of(step)
        files = {p.name: p.stat().st_size for p in sorted(shards.iterdir()) if p.is_file()}
        committed = replace(record, format=FORMAT, step=step, files=files, digests=digests or {})
        path = self._record_path(step)
        text = json.dumps(committed.to_json(), indent=1)
        write_text_atomically(path, text, path.with_name(f".{path.name}{_TEMP_MARK}{os.getpid()}"))
        fsync_directory(self.directory)
        self._prune()
        return Checkpoint(step, shards, committed)

    def newest_complete(self, older_than: int | None = None) -> Checkpoint | None:
        """The newest complete checkpoint (before step `older_than`), looking at no older one than it."""
        for step in self._recorded_steps():
            if older_than is not None and step >= older_than:
                continue
            found = self._complete(step)
            if found:
                return found
        return None

    def remove_incomplete(self) -> None:
        """Leftovers of writers that died: shards without a record, temp records. Never while a save runs."""
        if not self.directory.is_dir():
            return
        recorded = set(self._recorded_steps())
        for path in self.directory.iterdir():
            shards = _SHARDS.match(path.name)
            if shards and int(shards["step"]) not in recorded:
                shutil.rmtree(path, ignore_errors=True)
            elif path.name.startswith(".") and _TEMP_MARK in path.name:
                path.unlink(missing_ok=True)

    def _complete(self, step: int) -> Checkpoint | None:
        path = self._record_path(step)
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            console.line(f"[CKPT] skipping {path.name}: unreadable record ({type(exc).__name__}: {exc})")
            return None
        if record.get("format") != FORMAT:
            raise UnreadableFormat(
                f"{path} is a checkpoint of format {record.get('format', 2)}; this trainer reads format {FORMAT} "
                f"(sharded directories). Resume it with the trainer image that wrote it, or move {self.directory} "
                f"away to start the run from scratch."
            )
        shards = self.shards_of(step)
        for name, size in record["files"].items():
            try:
                actual = (shards / name).stat().st_size
            except OSError:
                actual = None
            if actual != size:
                console.line(f"[CKPT] skipping {shards.name}: {name} has {actual} bytes, its record says {size}")
                return None
        return Checkpoint(step, shards, CheckpointRecord.from_json(record))

    def _recorded_steps(self) -> list[int]:
        """Steps with a commit record, newest first (names only: nothing is opened)."""
        if not self.directory.is_dir():
            return []
        steps = (_RECORD.match(p.name) for p in self.directory.iterdir())
        return sorted((int(m["step"]) for m in steps if m), reverse=True)

    def _record_path(self, step: int) -> Path:
        return self.directory / f"ckpt-{step:08d}.json"

    def _prune(self) -> None:
        for step in self._recorded_steps()[self.keep :]:
            self._record_path(step).unlink(missing_ok=True)  # the record first: the shards then no longer count
            shutil.rmtree(self.shards_of(step), ignore_errors=True)
        fsync_directory(self.directory)
