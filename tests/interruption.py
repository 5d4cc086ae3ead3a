"""A plugin (pytest.ini: `-p interruption`): CI's time limit sends SIGTERM, and every process of the
run unwinds as on Ctrl-C, so that fixtures stop what they started (a local cluster among them).
With workers (pytest-xdist), the controller passes the signal on and ends with their reports."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    controller = not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))
    signal.signal(signal.SIGTERM, _interrupt_workers if controller else _interrupt)


def _interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _interrupt_workers(_signum, _frame):
    # Each worker unwinds and reports its interrupted session; the run then ends with their reports.
    for pid in _children(os.getpid()):
        os.kill(pid, signal.SIGTERM)


def _children(pid: int) -> list[int]:
    return [int(child) for task in Path(f"/proc/{pid}/task").iterdir() for child in (task / "children").read_text().split()]
