"""The token cache: a source tokenized once into a flat file of uint16 (or uint32) ids that every rank memory-maps.

A shard is named after a key that hashes the source (each file's path, size and mtime, the reader) and
the tokenizer's identity, so a changed input or tokenizer gets a shard of its own. Files in the cache:
  <name>.<key>.tokens  the ids, each document followed by the end-of-document id;
  <name>.<key>.json    the finished marker (count, dtype, key), written after the ids are in place;
  <name>.<key>.lock    flock'ed by the one process that prepares; the others wait for it.
Both files are written to a temp file, fsynced and renamed, so a crash mid-prepare leaves at most a temp
file (removed by the next preparer) or ids without a marker, and neither is ever read. The lock is an
flock: the kernel (or the NFS server) drops it when its holder dies, so a crashed preparer blocks no one.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainer import console
from trainer.tasks.lm.documents import DocumentSource
from trainer.checkpoint.durable import fsync_directory, write_text_atomically

FORMAT = 1  # bump when the layout or the joining of documents changes: old shards are then not used
CACHE_FLAG = "--token-cache-dir"
WAIT_FLAG = "--prepare-timeout"


@dataclass(frozen=True)
class Shard:
    directory: Path
    stem: str  # <source name>.<key>

    @property
    def tokens_path(self) -> Path:
        return self.directory / f"{self.stem}.tokens"

    @property
    def marker_path(self) -> Path:
        return self.directory / f"{self.stem}.json"

    @property
    def lock_path(self) -> Path:
        return self.directory / f"{self.stem}.lock"

    def marker(self) -> dict | None:
        """The finished marker, if it and the ids it describes are both complete."""
        try:
            marker = json.loads(self.marker_path.read_text())
            size = self.tokens_path.stat().st_size
        except (OSError, ValueError):
            return None
        if marker.get("format") != FORMAT or size != marker["count"] * np.dtype(marker["dtype"]).itemsize:
            return None
        return marker

    def open(self) -> np.memmap:
        """The ids, memory-mapped read-only: pages are read when used and shared by every process on the host."""
        marker = self.marker()
        if marker is None:
            raise FileNotFoundError(f"{self.tokens_path}: no complete shard (prepare it first)")
        return np.memmap(self.tokens_path, dtype=marker["dtype"], mode="r", shape=(marker["count"],))


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def shard_for(source: DocumentSource, tokenizer, cache_dir: Path) -> Shard:
    described = json.dumps({"format": FORMAT, "source": source.identity(), "tokenizer": tokenizer.identity}, sort_keys=True)
    key = hashlib.sha256(described.encode()).hexdigest()[:16]
    return Shard(cache_dir, f"{source.path.name}.{key}")


def prepare_tokens(source: DocumentSource, tokenizer, cache_dir: Path, wait_seconds: float) -> tuple[Shard, bool]:
    """The source's shard, tokenized now unless a complete one is cached; True when this process tokenized it."""
    shard = shard_for(source, tokenizer, cache_dir)
    if shard.marker() is not None:  # the common case, and the only one a read-only cache can serve
        return shard, False
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        lock = open(shard.lock_path, "a")
    except OSError as exc:
        raise SystemExit(
            f"{CACHE_FLAG} {cache_dir}: cannot write the token cache there ({exc.strerror}); give a writable "
            f"directory, e.g. {CACHE_FLAG} /out/token-cache when the data volume is read-only"
        ) from exc
    with lock:
        _hold(lock, shard, source, wait_seconds)
        if shard.marker() is not None:  # another process prepared it while this one waited
            return shard, False
        _write(shard, source, tokenizer)
    return shard, True


def _hold(lock, shard: Shard, source: DocumentSource, wait_seconds: float) -> None:
    deadline = time.monotonic() + wait_seconds
    waiting = False
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"{source.path}: another process has been preparing its tokens for more than {WAIT_FLAG} "
                    f"{wait_seconds:g} s (lock {shard.lock_path}); raise {WAIT_FLAG}, or prepare the cache "
                    "beforehand with python -m trainer.prepare"
                ) from None
            if not waiting:
                console.line(f"[DATA] waiting for another process preparing {source.path.name} (lock {shard.lock_path})")
                waiting = True
            time.sleep(0.2)


def _write(shard: Shard, source: DocumentSource, tokenizer) -> None:
    for leftover in shard.directory.glob(f"{glob.escape(shard.stem)}.*.tmp-*"):  # of a preparer that died: the lock is ours now
        leftover.unlink()
    dtype = token_dtype(tokenizer.vocab_size)
    count = 0
    temp = shard.directory / f"{shard.stem}.tokens.tmp-{os.getpid()}"
    with open(temp, "wb") as out:
        for texts in source.batches():
            ids = tokenizer.encode_batch(texts)
            ids.astype(dtype, copy=False).tofile(out)
            count += ids.size
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, shard.tokens_path)
    marker = {"format": FORMAT, "count": count, "dtype": dtype.name, "source": str(source.path), "tokenizer": tokenizer.identity}
    marker_path = shard.marker_path
    write_text_atomically(marker_path, json.dumps(marker, indent=1), marker_path.with_name(f"{marker_path.name}.tmp-{os.getpid()}"))
    fsync_directory(shard.directory)
