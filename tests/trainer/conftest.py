"""Fixtures for the trainer's tests."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from trainer_testing import REPO, Proc, descendants


@pytest.fixture
def spawn(tmp_path):
    """Start processes with their output in a log file; every one and all its descendants die at the end."""
    started: list[Proc] = []

    def start(args: list[str], env: dict[str, str], name: str) -> Proc:
        log = tmp_path / f"{name}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen(args, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        proc = Proc(popen, log)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        for pid in [proc.pid, *descendants(proc.pid)]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        proc.popen.wait(10)
