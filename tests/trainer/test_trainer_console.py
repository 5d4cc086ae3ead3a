"""Every process of a pod (torchrun's workers) writes to the same stdout: a line must reach it in one
write, or two ranks' lines interleave mid-line (a torn `[DONE]` line was seen in a world of two)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from trainer import console


class Writes(io.StringIO):
    """A stdout that keeps each write() apart."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return super().write(text)


def test_a_line_is_one_write_with_its_newline(monkeypatch: pytest.MonkeyPatch):
    out = Writes()
    monkeypatch.setattr(sys, "stdout", out)
    console.line("[DONE] rank=1 steps=32 seconds=4.2")
    assert out.calls == ["[DONE] rank=1 steps=32 seconds=4.2\n"]


def test_print_would_not_be(monkeypatch: pytest.MonkeyPatch):
    """Why console.line exists: print() writes the text and its newline apart."""
    out = Writes()
    monkeypatch.setattr(sys, "stdout", out)
    print("[DONE] rank=1", flush=True)
    assert out.calls == ["[DONE] rank=1", "\n"]


# What runs in the training processes and the entrypoint beside them, all on the pod's one stdout.
POD_MODULES = ("loop.py", "step.py", "train.py", "checkpoint/store.py", "checkpoint/sharded.py", "checkpoint/run_checkpoints.py",
               "tasks/lm/corpus.py", "tasks/lm/shards.py", "tracking/__init__.py", "tracking/fan_out.py",
               "tracking/loss_curve.py", "tracking/tensorboard_events.py", "tracking/mlflow_run.py", "entrypoint.py")  # fmt: skip


def test_the_lines_a_pods_processes_write_go_through_console():
    """Every line written in a pod is written whole: a rank's [DONE] once tore rank 0's background
    [CKPT] line, printed in two writes."""
    for module in POD_MODULES:
        source = (Path(console.__file__).parent / module).read_text()
        assert "print(" not in source, f"trainer/{module} prints: use console.line"
