"""What rank 0's log says over time: the newest checkpoint saved and when, the last line of a kind.
Each line is read with the trainer's own vocabulary (trainer/lines.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Optional

from trainer.lines import CheckpointSaved


@dataclass(frozen=True)
class Checkpoint:
    name: str
    step: int
    saved_at: Optional[datetime]  # from the log's timestamp, when the log has them


def split_timestamp(line: str) -> tuple[Optional[datetime], str]:
    """A `kubectl logs --timestamps` line as (its time, its text)."""
    stamp, _, text = line.partition(" ")
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")), text
    except ValueError:
        return None, line


def newest_checkpoint(timestamped_log: str) -> Optional[Checkpoint]:
    found = None
    for row in timestamped_log.splitlines():
        at, text = split_timestamp(row)
        if saved := CheckpointSaved.parse(text):
            found = Checkpoint(saved.checkpoint, saved.step, at)
    return found


def last_line(log: str, tag: str) -> Optional[str]:
    rows = [row for row in log.splitlines() if row.startswith(tag)]
    return rows[-1] if rows else None
