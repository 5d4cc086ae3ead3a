"""Turns SIGTERM (an eviction, a scale-down, torchrun shutting its workers) into a request to stop.

The handler only records the signal; the training loop checks it at step boundaries, where a
checkpoint can be written consistently on every rank.

Python runs a signal's handler in the main thread between two bytecodes. A rank whose main thread
waits in a collective that a vanished peer never joins (a crashed node, a cut network: no
connection reset ends the wait) runs none until the process group's timeout: torchrun, stopping
its workers to re-form the world, waits out its whole shutdown timeout, then kills it. So a thread
learns of the signal at once, from the interpreter's wakeup fd (written by the C-level handler
even while the main thread is inside torch), and ends the rank when the main thread has not
answered within a few of its steps' time: nothing can be checkpointed with a peer gone, and the
world resumes from its newest checkpoint.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable

from trainer import console
from trainer.lines import STOPPED

# 128 + SIGTERM, what a shell reports for a process SIGTERM ended: not success, so neither a Job
# nor torchrun takes a stopped run for a finished one, and the next start resumes it.
EXIT_STOPPED = 128 + signal.SIGTERM
# A main thread that runs Python answers a signal within a bytecode; one inside torch answers when
# its operation returns, which a healthy step's operations do within a step. Unanswered after the
# longer of these, it waits on a peer that is gone.
ANSWER_FLOOR_S = 5.0
ANSWER_STEP_FACTOR = 3


def answer_bound(slowest_step_s: float | None) -> float:
    """Seconds a SIGTERM may go unanswered by the main thread, given the slowest recent step."""
    return max(ANSWER_FLOOR_S, ANSWER_STEP_FACTOR * (slowest_step_s or 0.0))


class StopRequest:
    def __init__(self, exit_process: Callable[[int], None] = os._exit) -> None:
        self.signal: int | None = None
        self._exit = exit_process
        self._wakeup: tuple[int, int] | None = None

    def install(self, answer_within: Callable[[], float] = lambda: answer_bound(None)) -> None:
        """From the main thread: SIGTERM recorded for the loop, and a rank that cannot answer it ended."""
        signal.signal(signal.SIGTERM, self._record)
        if self._wakeup is None:
            read, write = os.pipe()
            os.set_blocking(write, False)
            self._wakeup = (read, write)
            # A forked child (a data loader's worker) inherits the fd: its own signals are not this rank's.
            os.register_at_fork(after_in_child=_no_wakeup_fd)
            threading.Thread(target=self._watch, args=(read, answer_within), name="sigterm-watch", daemon=True).start()
        signal.set_wakeup_fd(self._wakeup[1], warn_on_full_buffer=False)

    def uninstall(self) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if self._wakeup is not None:
            signal.set_wakeup_fd(-1)

    def _record(self, signum: int, _frame) -> None:
        self.signal = signum

    def _watch(self, wakeup: int, answer_within: Callable[[], float]) -> None:
        while signal.SIGTERM not in os.read(wakeup, 64):
            pass
        bound = answer_within()
        deadline = time.monotonic() + bound
        while self.signal is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.signal is None:
            console.line(f"{STOPPED} SIGTERM unanswered for {bound:g} s: this rank waits in a collective a gone peer never joins; "
                         f"it exits {EXIT_STOPPED} with no checkpoint, and the world resumes from its newest one")  # fmt: skip
            self._exit(EXIT_STOPPED)

    @property
    def requested(self) -> bool:
        return self.signal is not None


def _no_wakeup_fd() -> None:
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:  # forked from a thread other than the main one: that child runs no Python handler of ours
        pass
