"""One checkpoint written by every rank at once, in the background, and read back in place.

Saving copies the state into CPU memory (pinned on a GPU) while the loop waits: that copy is all
the loop pays. A background thread then writes the shards with torch.distributed.checkpoint,
whose planner gives each tensor that DDP replicates to one rank only, so the ranks share the
writing. Its collectives run on a gloo group of their own, never on the training's group, so they
cannot interleave with the loop's. One save at a time: the next save, a stop and the end of the
run wait for the one in flight. When the save returns, every rank's shard is on disk: the ranks read
the files back for their digests, and rank 0 commits the checkpoint (its record).

A save that fails (a full volume, a storage error on any rank) costs that checkpoint only: its
leftovers are removed, the run says why and how much room the volume has, and training goes on;
the next save tries again. A save that hangs past the timeout still ends the run.
"""

from __future__ import annotations

import shutil
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

from trainer import console
from trainer.checkpoint import digests
from trainer.checkpoint.record import CheckpointRecord
from trainer.checkpoint.store import CheckpointStore
from trainer.lines import CheckpointNotSaved, CheckpointSaved


class AsyncCheckpointer:
    def __init__(self, store: CheckpointStore, group: dist.ProcessGroup, is_main: bool, pinned: bool, timeout_s: float):
        self.store, self.group, self.is_main, self.timeout_s = store, group, is_main, timeout_s
        # One stager for the run: it keeps its CPU buffers, so later saves copy into memory already
        # allocated (and pinned). Staging is synchronous: the loop must not change a tensor being copied.
        self.stager = DefaultStager(StagingOptions(use_pinned_memory=pinned, use_shared_memory=False,
                                                   use_async_staging=False, use_non_blocking_copy=pinned))  # fmt: skip
        self.in_flight: tuple[Future, int, str] | None = None  # the commit, its step and reason
        self.failed_in_a_row = 0

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
                shards.result()  # raises on every rank alike when any rank's write failed
                found = digests.of_checkpoint(self.store.shards_of(step), self.group)
                if self.is_main:
                    name = self.store.commit(step, record, found).name
                    console.line(CheckpointSaved(name, record.reason, blocked, time.perf_counter() - started).text())
                committed.set_result(step)
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits next
                exc.add_note(self._room())  # the volume as it was when the save failed
                committed.set_exception(exc)

        written.add_done_callback(commit)
        self.in_flight = (committed, step, record.reason)
        return blocked

    def wait(self) -> None:
        """Until the save in flight (if any) is written and committed. One that failed is reported and
        its leftovers removed; raises what is not a failure to write (a bug, a save past the timeout)."""
        if self.in_flight is None:
            return
        (in_flight, step, reason), self.in_flight = self.in_flight, None
        failure = in_flight.exception(timeout=self.timeout_s)
        if failure is None:
            self.failed_in_a_row = 0
            return
        if not isinstance(failure, (CheckpointException, OSError)):
            raise failure
        self.failed_in_a_row += 1
        if self.is_main:
            self.store.remove_incomplete()  # no save runs now, and no rank writes before the next one's plan
            newest = self.store.newest_complete()
            console.line(CheckpointNotSaved(self.store.shards_of(step).name, reason, self.failed_in_a_row, _cause(failure),
                                            failure.__notes__[-1], newest.name if newest else None).text())  # fmt: skip

    def writing(self) -> bool:
        """A save is in flight and not yet committed (or failed)."""
        return self.in_flight is not None and not self.in_flight[0].done()

    def close(self) -> None:
        self.wait()
        self.stager.close()

    def _room(self) -> str:
        try:
            usage = shutil.disk_usage(self.store.directory)
        except OSError as exc:
            return f"the volume's room is unknown ({exc})"
        return f"{self.store.directory} had {usage.free / 2**20:.1f} MiB free of {usage.total / 2**20:.1f} MiB"


def _cause(failure: BaseException) -> str:
    """Each failing rank's error, without the tracebacks torch.distributed.checkpoint carries."""
    if isinstance(failure, CheckpointException):
        return "; ".join(f"rank {rank}: {type(exc).__name__}: {exc}" for rank, (exc, _) in sorted(failure.failures.items()))
    return f"{type(failure).__name__}: {failure}"  # rank 0's commit, or a read-back that names its rank


def load(state: dict[str, Any], shards: Path, group: dist.ProcessGroup) -> None:
    """Read the checkpoint into `state`'s own tensors, in place: no rank holds a second copy of the state.

    Raises on every rank (torch.distributed.checkpoint.api.CheckpointException) if any rank fails.
    """
    dcp.load(state, storage_reader=dcp.FileSystemReader(shards), process_group=group)
