"""The pod's torchrun agent (trainer.pod.agent) whose stderr sends its own process a SIGTERM while it
writes the first line holding PROBE_SIGNAL_ON: a pod deleted, resized, drained or preempted just as
torchrun logs (its workers' exit, a restart). `python agent_probe.py <the agent's arguments>`."""

from __future__ import annotations

import os
import signal
import sys
import time

from trainer.pod import agent


class SignalWhileWriting:
    def __init__(self, stream, trigger: str):
        self.stream, self.trigger, self.sent = stream, trigger, False

    def write(self, text: str) -> int:
        written = self.stream.write(text)
        if not self.sent and self.trigger in text:
            self.sent = True
            self.stream.flush()
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs here, inside this write
        return written

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


sys.stderr = SignalWhileWriting(sys.stderr, os.environ["PROBE_SIGNAL_ON"])
agent.main(sys.argv[1:])
