"""The process group's flight recorder, read when a hang ends the world.

torch records each collective a process group runs (its sequence number, the op, the tensors'
sizes and dtypes, its state) in a ring buffer of `TORCH_FR_BUFFER_SIZE` entries (2,000 by default,
Gloo's and NCCL's alike). Dumped by each rank of a hung world, it says which collective each one
waits in and which the others never reached. `dump()` gives torch's own pickle, the format its
analyzer reads (`python -m torch.distributed.flight_recorder.fr_trace DIR`, one `rank_<r>` file per
rank); `summary()` is the part an engineer reads first, written above the rank's stacks; `read()`
gives both.
"""

from __future__ import annotations

import pickle
import time
from typing import Any

import torch
import torch.distributed as dist

from trainer import console
from trainer.lines import HANG


def read() -> tuple[bytes | None, list[str]]:
    """The dump and its summary, for a hang's evidence; none where they cannot be read, which never
    stops the hang watch's teardown."""
    try:
        record = dump()
        return record, summary(record) if record is not None else []
    except Exception as error:
        console.line(f"{HANG} no flight recorder dump: {error}")
        return None, []


def dump() -> bytes | None:
    """This process's flight recorder in torch's pickle format; None without a process group, or
    where this torch has no recorder to read."""
    if not dist.is_available() or not dist.is_initialized():
        return None
    c10d = torch._C._distributed_c10d
    # NCCL keeps a recorder of its own (CUDA events); Gloo and the others share the generic one
    read = getattr(c10d, "_dump_nccl_trace" if "nccl" in str(dist.get_backend()) else "_dump_fr_trace", None)
    return read() if read is not None else None


def summary(record: bytes, now_ns: int | None = None) -> list[str]:
    """Each process group's last enqueued, started and completed collective, then every recorded
    collective it has not completed, oldest first, with how long before the dump it was enqueued."""
    trace: dict[str, Any] = pickle.loads(record)
    now_ns = time.time_ns() if now_ns is None else now_ns
    lines = []
    for group, status in sorted(trace.get("pg_status", {}).items()):
        completed = status["last_completed_collective"]
        lines.append(f"process group {group}: last enqueued collective #{status['last_enqueued_collective']}, "
                     f"started #{status['last_started_collective']}, completed #{completed}")  # fmt: skip
        for entry in trace.get("entries", []):
            if entry["process_group"][0] == group and not entry["is_p2p"] and entry["collective_seq_id"] > completed:
                waited = (now_ns - entry["time_created_ns"]) / 1e9
                lines.append(f"  not completed: #{entry['collective_seq_id']} {entry['profiling_name']} of "
                             f"{entry['input_sizes']} {'/'.join(entry['input_dtypes'])}, {entry['state']}, enqueued {waited:.1f} s before this dump")  # fmt: skip
    return lines
