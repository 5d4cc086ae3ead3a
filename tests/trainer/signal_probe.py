"""The real trainer whose smoke model signals its own process in a training step known in advance.

`python signal_probe.py smoke [flags]` runs trainer.train.main. With PROBE_SIGNAL_AT=<n>, rank 0
sends itself PROBE_SIGNAL (SIGTERM by default, or SIGKILL) in the forward pass of its n-th
training step: a SIGTERM stops the world after step n with a checkpoint, a SIGKILL ends the
process after step n-1 and leaves what the last checkpoint and the logs held.
"""

from __future__ import annotations

import os
import signal
import sys
import types

from trainer import smoke, train


def make_task(args):
    task = smoke.make_task(args)
    at = int(os.environ.get("PROBE_SIGNAL_AT", "0")) if os.environ.get("RANK", "0") == "0" else 0
    signum = signal.Signals[os.environ.get("PROBE_SIGNAL", "SIGTERM")]
    forwards = 0

    def count_training_steps(module, _inputs):
        nonlocal forwards
        if module.training:
            forwards += 1
            if forwards == at:
                os.kill(os.getpid(), signum)

    task.model.register_forward_pre_hook(count_training_steps)
    return task


if __name__ == "__main__":
    train.TASKS["smoke"] = types.SimpleNamespace(__doc__=smoke.__doc__, add_arguments=smoke.add_arguments, make_task=make_task)
    sys.exit(train.main(sys.argv[1:]))
