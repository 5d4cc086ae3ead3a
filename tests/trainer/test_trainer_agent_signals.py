"""A SIGTERM to a pod's torchrun agent (trainer/pod/agent.py) ends it whenever it comes, also while
torchrun writes a log line: there, torch's SignalException (an Exception) was taken by logging's
handleError for a failure of the log itself ("--- Logging error ---") and the agent went on, so a
pod deleted, resized, drained or preempted as its workers exited ran until its grace period ended
and was killed without its checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_testing import PYTHON, clean_env, run_to_end

PROBE = str(Path(__file__).with_name("agent_probe.py"))
# Its first run exits 143, as a worker stopped by its own SIGTERM does; a second run (the agent
# restarting the worker group) marks that it ran, then waits.
WORKER = """
import pathlib, sys, time
here = pathlib.Path(__file__).parent
if not (here / "ran-once").exists():
    (here / "ran-once").touch()
    time.sleep(1)
    sys.exit(143)
(here / "ran-again").touch()
time.sleep(20)
"""


@pytest.mark.timeout(120)
def test_a_sigterm_while_torchrun_logs_its_workers_exit_ends_the_agent(tmp_path):
    (tmp_path / "worker.py").write_text(WORKER)
    command = [PYTHON, PROBE, "--standalone", "--nnodes", "1", "--nproc-per-node", "1", "--max-restarts", "1", str(tmp_path / "worker.py")]
    code, text = run_to_end(command, clean_env(PROBE_SIGNAL_ON="failed (exitcode: 143)"), tmp_path / "agent.log", timeout=100)
    assert (tmp_path / "ran-once").exists(), text[-3000:]
    assert "--- Logging error ---" not in text, text[-3000:]
    assert "got signal: 15" in text and code != 0, text[-3000:]
    assert not (tmp_path / "ran-again").exists(), "the agent restarted its workers after its SIGTERM"
