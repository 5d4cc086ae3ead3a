"""trainer/stop.py in a fresh process: a SIGTERM the main thread answers is recorded for the loop
and ends nothing; one that reaches a forked child (a data loader's worker) is the child's alone.
A rank whose main thread cannot answer (stuck in a collective with a gone peer) is ended: tested
in a real world of two in test_trainer_multinode.py."""

from __future__ import annotations

import subprocess
import sys

from trainer_testing import REPO, clean_env

from trainer.stop import ANSWER_FLOOR_S, answer_bound

SCENARIO = """
import os, signal, time
from trainer.stop import StopRequest
exited = []
stop = StopRequest(exit_process=exited.append)
stop.install(answer_within=lambda: 1.0)
ready, told = os.pipe()
child = os.fork()
if child == 0:  # fork's hooks have run when it returns here; the child keeps the inherited handler, as a data loader's worker does
    os.write(told, b"up")
    time.sleep(30)
    os._exit(0)
os.read(ready, 2)
os.kill(child, signal.SIGTERM)
time.sleep(2)  # past the 1-s bound
os.kill(child, signal.SIGKILL)
os.waitpid(child, 0)
print("after the child's SIGTERM:", exited, stop.requested)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(2)
print("after its own SIGTERM:", exited, stop.requested)
"""


def test_a_sigterm_answered_by_the_main_thread_is_recorded_and_a_childs_is_not_this_ranks():
    result = subprocess.run([sys.executable, "-c", SCENARIO], env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["after the child's SIGTERM: [] False", "after its own SIGTERM: [] True"]


def test_the_answer_bound_is_a_few_slow_steps_and_never_below_its_floor():
    assert answer_bound(None) == ANSWER_FLOOR_S
    assert answer_bound(0.04) == ANSWER_FLOOR_S  # a GPT-2-small step on a GPU
    assert answer_bound(10.0) == 30.0  # a step of a large model: its operations may hold the main thread that long
