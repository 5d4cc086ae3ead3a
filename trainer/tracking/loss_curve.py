"""The run's loss curve as a picture: /out/<run>/loss.png, drawn from the run directory's own records.

Two series at the global optimizer step: the `[TRAIN]` lines' losses (train-steps.jsonl, each the
mean since the line before) and the epochs' train and validation losses (metrics.jsonl). Drawn from
the files, not from memory, so a resumed run draws what its earlier starts kept, and only that.
The PNG's text metadata says how many points it drew (`Points`: `steps=N epochs=M`), so a reader
can check the picture against the files. matplotlib is imported at the first drawing, not with the
trainer, and draws on its Agg canvas: no display.

A drawing costs rank 0 a fraction of a second of CPU, more as the run's records grow: where epochs
take seconds it was half of rank 0's work. So the curve is redrawn at an epoch end at most once a
minute (at every epoch end where epochs are longer), and drawn once more at the run's end, whatever
ended it, with every record kept by then.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from trainer.outputs import RunDir, temp_beside
from trainer.tracking.fan_out import EPOCH, TRAIN, say

PNG = "loss.png"
POINTS_KEY = "Points"
REDRAW_EVERY_S = 60.0


class LossCurve:
    """Keeps the `[TRAIN]` series in train-steps.jsonl and redraws loss.png after an epoch's record
    (the first, then at most once in REDRAW_EVERY_S) and at the run's end.

    A drawing that fails (an image without matplotlib, a value it cannot draw) is said once; training
    goes on, and each later drawing tries again.
    """

    def __init__(self, run: RunDir, run_name: str, clock: Callable[[], float] = time.monotonic):
        self.run, self.run_name, self.clock = run, run_name, clock
        self.said = False
        self.drawn_at: float | None = None
        self.records_since_drawn = False

    @classmethod
    def open(cls, run_dir: Path, run_name: str, first_step: int) -> LossCurve:
        run = RunDir(run_dir)
        run.root.mkdir(parents=True, exist_ok=True)  # the first [TRAIN] line can come before any other output
        run.forget_train_steps_from(first_step)  # this start redoes them: drawn once, with its figures
        return cls(run, run_name)

    def log(self, step: int, figures: dict[str, float]) -> None:
        self.records_since_drawn = True
        if not any(name.startswith(EPOCH) for name in figures):
            self.run.append_train_step({"global_step": step, **{k.removeprefix(TRAIN): v for k, v in figures.items()}})
        elif self.drawn_at is None or self.clock() - self.drawn_at >= REDRAW_EVERY_S:
            self._draw()  # the loop appended the epoch's record to metrics.jsonl before logging it

    def _draw(self) -> None:
        self.drawn_at, self.records_since_drawn = self.clock(), False
        try:
            draw(self.run, self.run_name)
        except Exception as error:  # a picture must never stop training
            if not self.said:
                self.said = True
                say(f"Loss curve: {PNG} not drawn ({type(error).__name__}: {error}); training goes on, "
                    f"and each later drawing tries again")  # fmt: skip

    def close(self, _status: str, _result: Mapping[str, Any]) -> None:
        if self.records_since_drawn:
            self._draw()


def draw(run: RunDir, run_name: str) -> None:
    """Write loss.png anew, renamed into place so that a reader never sees half a picture."""
    steps, epochs = _records(run.train_steps), _records(run.metrics)
    figure = _figure(run_name, steps, epochs)
    path = run.root / PNG
    temp = temp_beside(path)
    try:
        figure.savefig(temp, format="png", metadata={POINTS_KEY: f"steps={len(steps)} epochs={len(epochs)}"})
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)  # what a failed drawing left


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _figure(run_name: str, steps: list[dict], epochs: list[dict]):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # not pyplot: no global state, no backend chosen for a display

    figure = Figure(figsize=(8, 4.5), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    _plot(axes, steps, "loss", "-", "train steps", linewidth=1, alpha=0.6)
    _plot(axes, epochs, "train_loss", "o-", "epoch train loss")
    _plot(axes, epochs, "val_loss", "s-", "epoch validation loss")
    axes.set(title=f"{run_name}: loss", xlabel="global step", ylabel="loss")
    axes.grid(alpha=0.3)
    axes.legend()
    return figure


def _plot(axes, records: list[dict], key: str, style: str, label: str, **line) -> None:
    axes.plot([r["global_step"] for r in records], [r[key] for r in records], style, label=label, **line)
