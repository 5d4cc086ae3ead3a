"""TensorBoard: event files in `<run dir>/tensorboard/`, one per start of the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from trainer.tracking.fan_out import say

TENSORBOARD_DIR = "tensorboard"


class TensorBoard:
    def __init__(self, writer):
        self.writer = writer

    @classmethod
    def open(cls, directory: Path, first_step: int) -> TensorBoard | None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:  # a user's image without tensorboard
            say(f"TensorBoard: not installed ({error}); training goes on without event files")
            return None
        # purge_step: TensorBoard drops what earlier starts logged from first_step on, steps this start redoes
        writer = SummaryWriter(str(directory), purge_step=first_step)
        say(f"TensorBoard: event files in {directory}")
        return cls(writer)

    def log(self, step: int, figures: dict[str, float]) -> None:
        for tag, value in figures.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()  # a crash then loses at most what came after the last [TRAIN] line

    def close(self, _status: str, _result: Mapping[str, Any]) -> None:
        self.writer.close()  # the epochs' scalars already end with the result
