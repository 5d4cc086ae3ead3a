"""Lines on stdout, each in one write, and the reading of them back out of a log.

A pod's training processes share one stdout (torchrun's workers inherit it), and print() writes a
line's text and its newline apart: under PYTHONUNBUFFERED, as in the image, two ranks' lines then
interleave mid-line. One write of the whole line is not split by the kernel (a pipe takes up to
PIPE_BUF bytes whole; a file's writes are serialized).
"""

from __future__ import annotations

import sys
from typing import TextIO


def line(text: str, stream: TextIO | None = None) -> None:
    """`text` and its newline in one write to `stream` (stdout unless given), flushed."""
    out = stream or sys.stdout
    out.write(text + "\n")
    out.flush()


def tagged(text: str, tag: str) -> list[str]:
    """The lines of a log that start with `tag` (`[DONE]`, `[TRAIN]`, `[CKPT] resumed from`), in order."""
    return [row for row in text.splitlines() if row.startswith(tag)]


def fields(row: str) -> dict[str, str]:
    """The `key=value` fields of a tagged line such as `[TRAIN] epoch=1 global_step=4 loss=0.69`."""
    return dict(field.split("=", 1) for field in row.split()[1:] if "=" in field)
