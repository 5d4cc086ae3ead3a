"""Checkpoint files that are either complete or ignored.

A checkpoint is two files in the run's checkpoint directory:
  ckpt-<step>.pt    the torch.save payload
  ckpt-<step>.json  its commit record: sha256 and size of the .pt, plus progress for humans
Each is written to a temp file, fsynced and renamed, the record last. A crash at any point leaves
either no record (the .pt is ignored) or a record whose hash the .pt must match, so a partial or
corrupt newest checkpoint is skipped and the one before it is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, BinaryIO

import torch

_NAME = re.compile(r"^ckpt-(?P<step>[0-9]{8,})\.json$")
_TEMP_MARK = ".tmp-"


class _HashingWriter:
    """Hashes what torch.save writes on its way to the file, so the payload is not held twice."""

    def __init__(self, file: BinaryIO):
        self.file = file
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()


class CheckpointStore:
    def __init__(self, directory: Path, keep: int):
        if keep < 1:
            raise ValueError("keep at least one checkpoint")
        self.directory = Path(directory)
        self.keep = keep

    def save(self, step: int, payload: dict[str, Any], record: dict[str, Any]) -> Path:
        """Write checkpoint `step` atomically and drop all but the newest `keep`. One rank calls it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.remove_temp_files()
        data_path = self.directory / f"ckpt-{step:08d}.pt"
        digest, size = self._write_atomically(data_path, lambda f: _save_hashed(payload, f))
        commit = {**record, "step": step, "file": data_path.name, "sha256": digest, "bytes": size}
        self._write_atomically(self._record_path(step), lambda f: f.write(json.dumps(commit, indent=1).encode()))
        self._prune()
        return data_path

    def complete(self) -> list[tuple[int, Path]]:
        """(step, .pt path) of every checkpoint whose record exists and whose file matches it, newest first."""
        found = []
        for step in self._steps():
            record_path = self._record_path(step)
            try:
                record = json.loads(record_path.read_text())
                data_path = self.directory / record["file"]
                if data_path.stat().st_size == record["bytes"] and _sha256(data_path) == record["sha256"]:
                    found.append((step, data_path))
            except (OSError, ValueError, KeyError):
                continue
        return found

    def load_newest(self, map_location: str | torch.device = "cpu") -> tuple[Path, dict[str, Any]] | None:
        """The newest checkpoint that verifies and loads; older ones stand in for broken newer ones."""
        for _, path in self.complete():
            try:
                return path, load(path, map_location)
            except Exception as exc:  # noqa: BLE001 - any unreadable file means: try the previous one
                print(f"[CKPT] skipping {path.name}: {type(exc).__name__}: {exc}", flush=True)
        return None

    def remove_temp_files(self) -> None:
        """Leftovers of a writer that crashed: never a checkpoint, only disk usage."""
        for path in self.directory.glob(f".*{_TEMP_MARK}*"):
            path.unlink(missing_ok=True)

    def _steps(self) -> list[int]:
        if not self.directory.is_dir():
            return []
        steps = (_NAME.match(p.name) for p in self.directory.iterdir())
        return sorted((int(m["step"]) for m in steps if m), reverse=True)

    def _record_path(self, step: int) -> Path:
        return self.directory / f"ckpt-{step:08d}.json"

    def _prune(self) -> None:
        for step in self._steps()[self.keep :]:
            self._record_path(step).unlink(missing_ok=True)  # the record first: the .pt is then ignored
            (self.directory / f"ckpt-{step:08d}.pt").unlink(missing_ok=True)
        _fsync_dir(self.directory)

    def _write_atomically(self, path: Path, write) -> Any:
        temp = path.with_name(f".{path.name}{_TEMP_MARK}{os.getpid()}")
        with open(temp, "wb") as file:
            result = write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
        _fsync_dir(path.parent)
        return result


def load(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    # weights_only: a checkpoint is data; unpickling arbitrary objects from a shared volume is not needed
    return torch.load(path, map_location=map_location, weights_only=True)


def _save_hashed(payload: dict[str, Any], file: BinaryIO) -> tuple[str, int]:
    writer = _HashingWriter(file)
    torch.save(payload, writer)
    return writer.sha.hexdigest(), writer.size


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _fsync_dir(directory: Path) -> None:
    """Makes the rename itself durable: without it a power loss can forget the new name."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
