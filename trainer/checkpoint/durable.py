"""Files that survive a crash: written whole or not at all, and their renames made durable."""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomically(path: Path, text: str, temp: Path) -> None:
    """`text` into `temp`, fsynced, then renamed to `path`: a reader sees the old file or the whole new one.
    The caller names `temp`, so that it knows what a writer that died left behind."""
    with open(temp, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temp, path)


def fsync_directory(directory: Path) -> None:
    """Makes a rename in `directory` durable: without it a power loss can forget the new name."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
