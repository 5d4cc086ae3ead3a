"""The fan-out: what the loop talks to hands each figure to every tracker, and at the run's end its status."""

from __future__ import annotations

from typing import Any, Mapping

from trainer import console
from trainer.stop import StopRequest

FINISHED, KILLED, FAILED = "FINISHED", "KILLED", "FAILED"
TRAIN, EPOCH = "train/", "epoch/"  # the prefixes of a [TRAIN] line's figures and of an epoch record's


def numbers(record: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def say(line: str) -> None:
    """A tracker's own line: where it writes, or why it goes on without."""
    console.line(f"[TRACK] {line}")


class Trackers:
    """What the loop talks to: the figures go to every tracker; the run's end sets its status.

    As a context manager, the run ends FINISHED, KILLED when an exception leaves while a SIGTERM is
    pending (the stop, or a collective failing as the stopping world goes), FAILED otherwise.
    """

    def __init__(self, sinks: list, stop: StopRequest | None = None):
        self.sinks, self.stop = sinks, stop
        self.result: dict[str, Any] = {}

    def log_train(self, step: int, figures: Mapping[str, float]) -> None:
        self._log(step, {f"{TRAIN}{k}": v for k, v in figures.items()})

    def log_epoch(self, record: Mapping[str, Any]) -> None:
        figures = numbers({k: v for k, v in record.items() if k != "global_step"})
        self._log(record["global_step"], {f"{EPOCH}{k}": v for k, v in figures.items()})

    def log_result(self, summary: Mapping[str, Any]) -> None:
        if self.sinks:
            self.result = dict(summary)

    def _log(self, step: int, figures: dict[str, float]) -> None:
        for sink in self.sinks:
            sink.log(step, figures)

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, kind, _value, _traceback) -> None:
        status = FINISHED if kind is None else KILLED if self.stop and self.stop.requested else FAILED
        for sink in self.sinks:
            sink.close(status, self.result)


NO_TRACKERS = Trackers([])
