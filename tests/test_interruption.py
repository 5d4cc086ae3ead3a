"""A SIGTERM to the test run (CI's time limit) reaches every worker, whose fixtures stop what they
started before the run ends: tests/interruption.py, run here on a suite of three waiting tests in
two workers (the third never starts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from waiting import wait_for

WAITING_SUITE = '''
import subprocess, time
from pathlib import Path
import pytest

MARKS = Path(__file__).parent / "marks"

@pytest.fixture
def child():
    proc = subprocess.Popen(["sleep", "300"])
    (MARKS / f"started-{proc.pid}").touch()
    yield
    proc.kill()
    proc.wait()
    (MARKS / f"stopped-{proc.pid}").touch()

@pytest.mark.parametrize("n", [0, 1, 2])  # the third waits for a worker
def test_waits(child, n):
    time.sleep(300)
'''


def started_children(marks: Path, prefix: str) -> list[int]:
    return sorted(int(mark.name.split("-")[1]) for mark in marks.glob(f"{prefix}-*"))


def test_a_sigterm_to_the_run_stops_what_every_worker_started(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "test_waiting.py").write_text(WAITING_SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    # the run's own options only: PYTEST_ADDOPTS may name plugins that PYTHONPATH no longer reaches
    env = {**{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}, "PYTHONPATH": str(Path(__file__).parent)}
    # pytest.ini's options: no worker replaces an interrupted one
    command = [sys.executable, "-m", "pytest", "-p", "interruption", "-n", "2", "--max-worker-restart", "0", "-p", "no:cacheprovider",
               "-q", str(tmp_path)]  # fmt: skip
    run = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: len(started_children(marks, "started")) == 2, 60, "both tests to start their child")
        time.sleep(1)  # both inside their test
        run.send_signal(signal.SIGTERM)
        run.wait(60)
        stopped_when_the_run_ended = started_children(marks, "stopped")
    finally:
        run.kill()
        output = run.communicate()[0]
        children = started_children(marks, "started")
        left = [pid for pid in children if Path(f"/proc/{pid}").exists()]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    # the run ends after its workers' fixtures stopped what they started, not before
    assert stopped_when_the_run_ended == children, output
    assert not left, output
