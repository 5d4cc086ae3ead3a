"""One checkpoint written by every rank at once, in the background, and read back in place.

Saving copies the state into CPU memory (pinned on a GPU) while the loop waits: that copy is all
the loop pays. A background thread then writes the shards with torch.distributed.checkpoint,
whose planner gives each tensor that DDP replicates to one rank only, so the ranks share the
writing. Its collectives run on a gloo group of their own, never on the training's group, so they
cannot interleave with the loop's. One save at a time: the next save, a stop and the end of the
run wait for the one in flight. Rank 0 commits the checkpoint (its record) when its save returns,
which is after every rank's shard is on disk.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

from trainer import console
from trainer.checkpoint.record import CheckpointRecord
from trainer.checkpoint.store import CheckpointStore


class AsyncCheckpointer:
    def __init__(self, store: CheckpointStore, group: dist.ProcessGroup, is_main: bool, pinned: bool, timeout_s: float):
        self.store, self.group, self.is_main, self.timeout_s = store, group, is_main, timeout_s
        # One stager for the run: it keeps its CPU buffers, so later saves copy into memory already
        # allocated (and pinned). Staging is synchronous: the loop must not change a tensor being copied.
        self.stager = DefaultStager(StagingOptions(use_pinned_memory=pinned, use_shared_memory=False,
                                                   use_async_staging=False, use_non_blocking_copy=pinned))  # fmt: skip
        self.in_flight: Future | None = None

    def save(self, step: int, state: dict[str, Any], record: CheckpointRecord) -> float:
        """Start writing checkpoint `step`; returns the seconds the caller was blocked."""
        started = time.perf_counter()
        self.wait()
        writer = dcp.FileSystemWriter(self.store.shards_of(step), sync_files=True)
        written = dcp.async_save(state, storage_writer=writer, process_group=self.group,
                                 async_checkpointer_type=AsyncCheckpointerType.THREAD, async_stager=self.stager)  # fmt: skip
        blocked = time.perf_counter() - started
        committed: Future = Future()  # done once the record is written, not merely the shards

        def commit(shards: Future) -> None:
            try:
                shards.result()
                if self.is_main:
                    name = self.store.commit(step, record).name
                    console.line(f"[CKPT] saved {name} ({record.reason}): blocked the loop {blocked:.4f}s, "
                                 f"written in {time.perf_counter() - started:.4f}s")  # fmt: skip
                committed.set_result(step)
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits next
                committed.set_exception(exc)

        written.add_done_callback(commit)
        self.in_flight = committed
        return blocked

    def wait(self) -> None:
        """Until the save in flight (if any) is written and committed; raises what it raised."""
        if self.in_flight is not None:
            in_flight, self.in_flight = self.in_flight, None
            in_flight.result(timeout=self.timeout_s)

    def close(self) -> None:
        self.wait()
        self.stager.close()


def load(state: dict[str, Any], shards: Path, group: dist.ProcessGroup) -> None:
    """Read the checkpoint into `state`'s own tensors, in place: no rank holds a second copy of the state.

    Raises on every rank (torch.distributed.checkpoint.api.CheckpointException) if any rank fails.
    """
    dcp.load(state, storage_reader=dcp.FileSystemReader(shards), process_group=group)
