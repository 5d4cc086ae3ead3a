"""Lines on stdout, each in one write. What the tagged lines say, and their reading back out of a log,
is trainer/lines.py's.

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

