"""The run directory: /out/<run>/{epoch-N/, best -> epoch-N, metrics.jsonl, train-steps.jsonl, loss.png, checkpoints/,
hangs/<time>/ (what the hang watch leaves when it ends a world: trainer/hang_watch.py)}.

metrics.jsonl holds one record per epoch, train-steps.jsonl one per `[TRAIN]` line (trainer/tracking/loss_curve.py),
loss.png draws both (trainer/tracking/loss_curve.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

BEST = "best"
METRICS = "metrics.jsonl"
TRAIN_STEPS = "train-steps.jsonl"
CHECKPOINTS = "checkpoints"
HANGS = "hangs"
COMPILE_CACHE = "compile-cache"  # torch.compile's, shared by every pod of the run (trainer/compile_cache.py)


class RunDir:
    def __init__(self, root: Path):
        self.root = Path(root)

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS

    @property
    def hangs(self) -> Path:
        return self.root / HANGS

    @property
    def compile_cache(self) -> Path:
        return self.root / COMPILE_CACHE

    @property
    def metrics(self) -> Path:
        return self.root / METRICS

    @property
    def train_steps(self) -> Path:
        return self.root / TRAIN_STEPS

    def epoch_dir(self, epoch: int) -> Path:
        path = self.root / f"epoch-{epoch}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def mark_best(self, epoch: int) -> None:
        """Point `best` at epoch-N with a rename, so a reader never sees it missing or half-made."""
        temp = temp_beside(self.root / BEST)
        temp.unlink(missing_ok=True)
        temp.symlink_to(f"epoch-{epoch}")
        os.replace(temp, self.root / BEST)

    def append_metrics(self, record: dict[str, Any]) -> None:
        _append(self.metrics, record)

    def append_train_step(self, record: dict[str, Any]) -> None:
        _append(self.train_steps, record)

    def forget_metrics_from(self, epoch: int) -> None:
        """A resumed run redoes epoch `epoch` and later: drop their lines so none is written twice."""
        _forget_from(self.metrics, "epoch", epoch)

    def forget_train_steps_from(self, step: int) -> None:
        """A resumed run redoes global step `step` and later: drop their records so none is drawn twice."""
        _forget_from(self.train_steps, "global_step", step)


def _append(path: Path, record: dict[str, Any]) -> None:
    """One line, fsynced before the next: a crash can cut short the last line only."""
    with open(path, "a") as file:
        file.write(json.dumps(record) + "\n")
        file.flush()
        os.fsync(file.fileno())


def _forget_from(path: Path, key: str, first: int) -> None:
    """Keep the records whose `key` is below `first`.

    A last line that a crash cut short is dropped too: its record is redone, and it must not stop
    the resume. A broken line before the last is an error: each append is fsynced before the
    next, so a crash cannot leave one there, and dropping it would hide another kind of damage.
    """
    if not path.exists():
        return
    lines = path.read_text().splitlines()
    values = [_int_of(line, key) for line in lines]
    for number, (line, value) in enumerate(zip(lines[:-1], values), start=1):
        if value is None:
            raise ValueError(
                f"{path} line {number}: not a whole JSON record with an integer {key!r} ({line[:80]!r}); only the "
                f"last line can be cut short by a crash: repair or delete that line, then start the run again"
            )
    kept = [line for line, value in zip(lines, values) if value is not None and value < first]
    temp = temp_beside(path)
    temp.write_text("".join(line + "\n" for line in kept))
    os.replace(temp, path)


def _int_of(line: str, key: str) -> int | None:
    try:
        value = json.loads(line)[key]
    except (ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) else None


def temp_beside(path: Path) -> Path:
    """Where this process writes `path`'s next version before renaming it into place."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def write_json(path: Path, record: dict[str, Any]) -> None:
    temp = temp_beside(path)
    temp.write_text(json.dumps(record, indent=1))
    os.replace(temp, path)
