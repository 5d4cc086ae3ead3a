"""A run's checkpoints as the training loop uses them: one call to save, one to resume.

Saving: every rank, at the same step, hands over its state and the record; each writes its share
in the background (trainer/checkpoint/sharded.py) and rank 0 commits the record
(trainer/checkpoint/store.py). Resuming: rank 0 chooses the newest complete checkpoint, the ranks
check its files against the record's digests, every rank loads it, and when it differs or cannot be
loaded (on any rank: the verdict reaches every rank alike) all go on together to the one before.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from torch.distributed.checkpoint.api import CheckpointException

from trainer import console
from trainer.checkpoint import digests, sharded
from trainer.checkpoint.record import CheckpointRecord
from trainer.checkpoint.store import CheckpointStore, UnreadableFormat
from trainer.distributed import Dist, background_group, main_decides


class RunCheckpoints:
    def __init__(self, directory: Path, keep: int, d: Dist, every_seconds: float):
        self.d, self.every_seconds = d, every_seconds
        self.store = CheckpointStore(directory, keep)
        self.group = background_group(d)
        self.writer = sharded.AsyncCheckpointer(
            self.store, self.group, d.is_main, pinned=d.device.type == "cuda", timeout_s=d.timeout.total_seconds()
        )
        self.saved_step = -1
        self.saved_at = time.monotonic()

    def save(self, step: int, state: dict[str, Any], record: CheckpointRecord) -> None:
        """Called by every rank at the same step, with its own state and the same record."""
        self.writer.save(step, state, record)
        self.saved_step, self.saved_at = step, time.monotonic()

    def time_is_up(self) -> bool:
        """A checkpoint by time is due. Rank 0's clock alone decides, so the ranks' clocks need not agree."""
        return self.d.is_main and self.every_seconds > 0 and time.monotonic() - self.saved_at >= self.every_seconds

    def resume(self, load: Callable[[Path, CheckpointRecord], None]) -> tuple[str, CheckpointRecord] | None:
        """`load(shards, record)` the newest complete checkpoint on every rank; its name and record, or
        None when there is none (the run starts from scratch)."""
        if self.d.is_main:
            self.store.remove_incomplete()  # no save runs yet: a directory without its record is a dead writer's
        failed_step = None
        while True:
            chosen = main_decides(self.d, self._choose(failed_step) if self.d.is_main else None)
            if chosen is None:
                return None
            if "error" in chosen:
                raise UnreadableFormat(chosen["error"])
            shards = Path(chosen["directory"])
            damaged = digests.mismatches(shards, chosen["record"].digests, self.group)
            if damaged:
                self._log(f"[CKPT] skipping {shards.name}: {'; '.join(damaged)}")
                failed_step = chosen["step"]
                continue
            try:
                load(shards, chosen["record"])
            except CheckpointException as exc:  # raised on every rank alike: all go on to the one before
                self._log(f"[CKPT] skipping {shards.name}: unloadable ({str(exc)[:300]})")
                failed_step = chosen["step"]
                continue
            self.saved_step = chosen["step"]
            return shards.name, chosen["record"]

    def load_shards(self, state: dict[str, Any], shards: Path) -> None:
        """Every rank reads the checkpoint into `state`'s own tensors, in place."""
        sharded.load(state, shards, self.group)

    def close(self) -> None:
        """Until the save in flight is written and committed."""
        self.writer.close()

    def _choose(self, older_than: int | None) -> dict[str, Any] | None:
        """Rank 0's choice, or the reason there is none to choose, as every rank will act on it."""
        try:
            found = self.store.newest_complete(older_than)
        except UnreadableFormat as exc:
            return {"error": str(exc)}
        return found and {"step": found.step, "directory": str(found.directory), "record": found.record}

    def _log(self, line: str) -> None:
        if self.d.is_main:
            console.line(line)
