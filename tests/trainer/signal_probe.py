"""The real trainer whose smoke model signals its own process in a training step known in advance.

`python signal_probe.py smoke [flags]` runs trainer.train.main. With PROBE_SIGNAL_AT=<n>, rank 0
sends itself PROBE_SIGNAL (SIGTERM by default, or SIGKILL) in the forward pass of its n-th
training step: a SIGTERM stops the world after step n with a checkpoint, a SIGKILL ends the
process after step n-1 and leaves what the last checkpoint and the logs held. With
PROBE_AWAIT_MLFLOW=1 the signal waits (at most 120 s) until the run's MLflow run has every step
before n, so that it lands after the server got what this start logged; with
PROBE_AWAIT_CHECKPOINT=<step> it waits (at most 120 s) until that step's checkpoint is committed,
since checkpoints are written in the background and a signal before the commit finds none.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import types
import urllib.request
from pathlib import Path

from trainer import tracking, train
from trainer.tasks import smoke


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
                if os.environ.get("PROBE_AWAIT_MLFLOW"):
                    await_mlflow(args.out_dir / args.run_name, step=at - 1)
                if checkpoint := os.environ.get("PROBE_AWAIT_CHECKPOINT"):
                    await_file(args.out_dir / args.run_name / "checkpoints" / f"ckpt-{int(checkpoint):08d}.json")
                os.kill(os.getpid(), signum)

    task.model.register_forward_pre_hook(count_training_steps)
    return task


def await_file(path: Path) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {path} within 120 s")
        time.sleep(0.05)


def await_mlflow(run_dir: Path, step: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if (run_dir / tracking.MLFLOW_RUN_FILE).exists():
            run_id = json.loads((run_dir / tracking.MLFLOW_RUN_FILE).read_text())["run_id"]
            url = f"{os.environ['MLFLOW_TRACKING_URI']}/api/2.0/mlflow/runs/get?run_id={run_id}"
            with urllib.request.urlopen(url, timeout=10) as response:
                metrics = json.loads(response.read())["run"]["data"].get("metrics", [])
            if any(m["key"] == "train/loss" and m["step"] >= step for m in metrics):
                return
        time.sleep(0.2)
    raise TimeoutError(f"MLflow has no train/loss at step {step} within 120 s")


if __name__ == "__main__":
    train.TASKS["smoke"] = types.SimpleNamespace(__doc__=smoke.__doc__, add_arguments=smoke.add_arguments, make_task=make_task)
    sys.exit(train.main(sys.argv[1:]))
