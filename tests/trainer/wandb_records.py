"""What a W&B offline run holds, read from its `.wandb` file as `wandb sync` would upload it.

The file is a log of W&B's own protobuf `Record`s in LevelDB's log format: a 7-byte header
(`:W&B`, magic 0xBEE1, version 0), then 32 KiB blocks of chunks, each with a CRC, a length and
whether it is a whole record or its first, middle or last part. The client keeps no Python reader
of it (its datastore moved into wandb-core), so the tests read it here, checking every CRC.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 32 * 1024
CHUNK_HEADER = struct.Struct("<IHB")  # CRC-32 of the kind byte and the data, the length, the kind
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    run_id: str
    project: str
    config: dict = field(default_factory=dict)
    history: dict[int, dict[str, float]] = field(default_factory=dict)  # by step
    summary: dict = field(default_factory=dict)
    preempting: bool = False
    exit_code: int | None = None  # None: the process ended before the run did


def offline_runs(run_dir: Path) -> list[OfflineRun]:
    """Every offline run under `<run dir>/wandb/`, oldest first (one per start of the training run)."""
    return [read(path) for path in sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))]


def read(path: Path) -> OfflineRun:
    from wandb.proto import wandb_internal_pb2 as pb

    run = OfflineRun("", "")
    for raw in records(path.read_bytes()):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.run_id, run.project = record.run.run_id, record.run.project
            run.config.update({item.key: json.loads(item.value_json) for item in record.run.config.update})
        elif kind == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            run.history[int(items.pop("_step"))] = {k: v for k, v in items.items() if not k.startswith("_")}
        elif kind == "summary":
            run.summary.update({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.summary.update})
        elif kind == "preempting":
            run.preempting = True
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def records(data: bytes):
    ident, magic, version = struct.unpack("<4sHB", data[:7])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), (ident, magic, version)
    position, pending = 7, b""
    while position + CHUNK_HEADER.size <= len(data):
        if BLOCK - position % BLOCK < CHUNK_HEADER.size:  # a block's tail too short for a header is padding
            position += BLOCK - position % BLOCK
            continue
        checksum, length, kind = CHUNK_HEADER.unpack_from(data, position)
        if (length, kind) == (0, 0):
            return  # zeros past the last chunk
        start = position + CHUNK_HEADER.size
        chunk = data[start : start + length]
        assert zlib.crc32(bytes([kind]) + chunk) == checksum, f"chunk at {position}: bad checksum"
        position = start + length
        pending += chunk
        if kind in (FULL, LAST):
            yield pending
            pending = b""
