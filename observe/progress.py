"""Rank 0's `[TRAIN]` lines drawn as a progress bar per epoch: steps, throughput, loss and an ETA.

On a terminal the bar is redrawn in place and other lines print above it; elsewhere (a CI log, a
pipe) each update is a line of its own. The ETA comes from the steps the current world has done
since its first `[TRAIN]` line seen here and the time since then: lines arrive in bursts, so the
pace between two of them says little.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Callable, Optional, TextIO

from trainer.lines import TrainLine

BAR_WIDTH = 24
CLEAR_LINE = "\r\x1b[K"


def duration(seconds: float) -> str:
    return str(timedelta(seconds=round(max(seconds, 0.0))))


def bar(done: int, total: int, width: int = BAR_WIDTH) -> str:
    filled = width * done // total if total else width
    return "█" * filled + "░" * (width - filled)


class Progress:
    def __init__(self, out: TextIO, terminal: bool, clock: Callable[[], float] = time.monotonic):
        self.out, self.terminal, self.clock = out, terminal, clock
        self.first: Optional[tuple[float, int]] = None  # (when, global step) of this world's first line
        self.steps_per_s: Optional[float] = None
        self.bar_shown = False

    def train(self, figures: TrainLine) -> None:
        now = self.clock()
        if self.first is None:
            self.first = (now, figures.global_step)
        elif figures.global_step > self.first[1] and now > self.first[0]:
            self.steps_per_s = (figures.global_step - self.first[1]) / (now - self.first[0])
        self._draw(self.render(figures))

    def render(self, f: TrainLine) -> str:
        eta = (f"ETA {duration((f.steps - f.step) / self.steps_per_s)} (run {duration(f.steps_left / self.steps_per_s)})"
               if self.steps_per_s else "ETA …")  # fmt: skip
        return (f"epoch {f.epoch}/{f.epochs} {bar(f.step, f.steps)} {f.step}/{f.steps} steps · "
                f"{f.rate:,.0f} {f.unit}/s · loss {f.loss:.4f} · {eta}")  # fmt: skip

    def world_changed(self) -> None:
        """A new world trains at another pace: the ETA starts again from its own steps."""
        self.first, self.steps_per_s = None, None

    def say(self, text: str) -> None:
        """A line of its own, above the bar."""
        if self.bar_shown:
            self.out.write(CLEAR_LINE)
            self.bar_shown = False
        self.out.write(text + "\n")
        self.out.flush()

    def _draw(self, text: str) -> None:
        if self.terminal:
            self.out.write(CLEAR_LINE + text)
            self.bar_shown = True
        else:
            self.out.write(text + "\n")
        self.out.flush()
