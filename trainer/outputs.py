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

        A line a crash cut short (it can only be the last: each append is fsynced) is dropped
        too: its epoch is redone, and it must not stop the resume.
        """
        if not self.metrics.exists():
            return
        lines = self.metrics.read_text().splitlines()
        kept = [line for line in lines if (line_epoch := _epoch_of(line)) is not None and line_epoch < epoch]
        temp = self.metrics.with_name(f".{METRICS}.tmp-{os.getpid()}")
        temp.write_text("".join(line + "\n" for line in kept))
        os.replace(temp, self.metrics)


def _epoch_of(line: str) -> int | None:
    try:
        return json.loads(line)["epoch"]
    except (ValueError, KeyError, TypeError):
        return None


def write_json(path: Path, record: dict[str, Any]) -> None:
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    temp.write_text(json.dumps(record, indent=1))
    os.replace(temp, path)
