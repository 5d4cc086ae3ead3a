"""The run's loss curve as a picture: /out/<run>/loss.png, drawn from the run directory's own records.

Two series at the global optimizer step: the `[TRAIN]` lines' losses (train-steps.jsonl, each the
mean since the line before) and the epochs' train and validation losses (metrics.jsonl). Drawn from
the files, not from memory, so a resumed run draws what its earlier starts kept, and only that.
The PNG's text metadata says how many points it drew (`Points`: `steps=N epochs=M`), so a reader
can check the picture against the files. matplotlib is imported at the first drawing, not with the
trainer, and draws on its Agg canvas: no display.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from trainer.outputs import RunDir, temp_beside

PNG = "loss.png"
POINTS_KEY = "Points"


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
