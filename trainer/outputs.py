"""The run directory: /out/<run>/{epoch-N/, best -> epoch-N, metrics.jsonl, checkpoints/}."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

BEST = "best"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"


class RunDir:
    def __init__(self, root: Path):
        self.root = Path(root)

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS

    @property
    def metrics(self) -> Path:
        return self.root / METRICS

    def epoch_dir(self, epoch: int) -> Path:
        path = self.root / f"epoch-{epoch}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def mark_best(self, epoch: int) -> None:
        """Point `best` at epoch-N with a rename, so a reader never sees it missing or half-made."""
        temp = self.root / f".{BEST}.tmp-{os.getpid()}"
        temp.unlink(missing_ok=True)
        temp.symlink_to(f"epoch-{epoch}")
        os.replace(temp, self.root / BEST)

    def append_metrics(self, record: dict[str, Any]) -> None:
        with open(self.metrics, "a") as file:
            file.write(json.dumps(record) + "\n")
            file.flush()
            os.fsync(file.fileno())

    def forget_metrics_from(self, epoch: int) -> None:
        """A resumed run redoes epoch `epoch` and later: drop their lines so none is written twice.

        A last line that a crash cut short is dropped too: its epoch is redone, and it must not stop
        the resume. A broken line before the last is an error: each append is fsynced before the
        next, so a crash cannot leave one there, and dropping it would hide another kind of damage.
        """
        if not self.metrics.exists():
            return
        lines = self.metrics.read_text().splitlines()
        epochs = [_epoch_of(line) for line in lines]
        for number, (line, line_epoch) in enumerate(zip(lines[:-1], epochs), start=1):
            if line_epoch is None:
                raise ValueError(
                    f"{self.metrics} line {number}: not a whole JSON record with an epoch ({line[:80]!r}); only the "
                    f"last line can be cut short by a crash: repair or delete that line, then start the run again"
                )
        kept = [line for line, line_epoch in zip(lines, epochs) if line_epoch is not None and line_epoch < epoch]
        temp = self.metrics.with_name(f".{METRICS}.tmp-{os.getpid()}")
        temp.write_text("".join(line + "\n" for line in kept))
        os.replace(temp, self.metrics)


def _epoch_of(line: str) -> int | None:
    try:
        epoch = json.loads(line)["epoch"]
    except (ValueError, KeyError, TypeError):
        return None
    return epoch if isinstance(epoch, int) else None


def write_json(path: Path, record: dict[str, Any]) -> None:
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    temp.write_text(json.dumps(record, indent=1))
    os.replace(temp, path)
