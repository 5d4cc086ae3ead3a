"""Turns SIGTERM (an eviction, a scale-down, torchrun shutting its workers) into a request to stop.

The handler only records the signal; the training loop checks it at step boundaries, where a
checkpoint can be written consistently on every rank.
"""

from __future__ import annotations

import signal

# 128 + SIGTERM, what a shell reports for a process SIGTERM ended: not success, so neither a Job
# nor torchrun takes a stopped run for a finished one, and the next start resumes it.
EXIT_STOPPED = 128 + signal.SIGTERM


class StopRequest:
    def __init__(self) -> None:
        self.signal: int | None = None

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._record)

    def uninstall(self) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def _record(self, signum: int, _frame) -> None:
        self.signal = signum

    @property
    def requested(self) -> bool:
        return self.signal is not None
