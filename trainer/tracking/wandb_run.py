"""Weights & Biases: one W&B run for the whole training run, resumed across restarts.

On when `WANDB_API_KEY` is set or `WANDB_MODE` is `offline` (and off when it is `disabled`). W&B's
own variables say the rest as its client reads them (`WANDB_ENTITY`, `WANDB_BASE_URL`,
`WANDB_MODE`); `WANDB_PROJECT` defaults to the run name. The run's id is kept in
`<run dir>/wandb-run.json`, so a restart resumes the same W&B run; its files, and an offline run
whole, go under `<run dir>/wandb/`, on the outputs claim, where `wandb sync` finds them later.

As for MLflow, the client works from a thread of its own: `wandb.init` against a server that does
not answer takes its `init_timeout` to fail (90 s; `WANDB_INIT_TIMEOUT`), and rank 0 must not keep
the world waiting that long. Figures queue up meanwhile; a client that cannot start (or an image
without `wandb`) turns W&B off for this process with one line. The end waits at most CLOSE_WAIT_S
(W&B's `finish_timeout`): what is unsent stays on disk.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import uuid
from functools import partial
from pathlib import Path
from typing import Any, Mapping

from trainer import contract as c
from trainer.outputs import write_json
from trainer.stop import EXIT_STOPPED
from trainer.tracking.fan_out import FAILED, FINISHED, KILLED, say

WANDB_RUN_FILE = "wandb-run.json"
CLOSE_WAIT_S = 30.0
EXIT_CODES = {FINISHED: 0, KILLED: EXIT_STOPPED, FAILED: 1}  # W&B: 0 is finished, any other failed
_END = object()


def wanted(env: Mapping[str, str]) -> bool:
    mode = env.get(c.WANDB_MODE, "")
    return mode != "disabled" and (bool(env.get(c.WANDB_API_KEY)) or mode == "offline")


class WandbRun:
    """One W&B run for the whole training run, resumed across restarts."""

    def __init__(self, run_dir: Path, run_name: str, flags: Mapping[str, Any]):
        self.run_dir, self.run_name = run_dir, run_name
        self.project = os.environ.get(c.WANDB_PROJECT) or run_name
        self.flags = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in flags.items()}
        self.jobs: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._work, name="wandb", daemon=True)
        self.thread.start()

    # called by the training loop: each returns at once
    def log(self, step: int, figures: dict[str, float]) -> None:
        self.jobs.put(partial(self._log, step, figures))

    def close(self, status: str, result: Mapping[str, Any]) -> None:
        self.jobs.put(partial(self._end, status, dict(result)))
        self.jobs.put(_END)
        self.thread.join(CLOSE_WAIT_S + 5)
        if self.thread.is_alive():
            say(f"W&B: still busy {CLOSE_WAIT_S:.0f}s after the run's end; leaving (what is unsent stays under {self.run_dir / 'wandb'})")

    # the thread
    def _work(self) -> None:
        try:
            run = self._open()
            while (job := self.jobs.get()) is not _END:
                job(run)
        except Exception as error:  # no wandb in the image, or the client's errors (CommError, UsageError, ...)
            first_line = str(error).splitlines()[0] if str(error) else ""
            say(f"W&B: {type(error).__name__}: {first_line}; going on without W&B for this process "
                f"(the figures stay in TensorBoard and metrics.jsonl)")  # fmt: skip
            while self.jobs.get() is not _END:
                pass

    def _open(self):
        import wandb  # here, not at the start: its import costs rank 0 seconds the world would wait

        run_file = self.run_dir / WANDB_RUN_FILE
        stored = json.loads(run_file.read_text()) if run_file.exists() else {}
        run_id = stored.get("id") or uuid.uuid4().hex[:16]
        settings = wandb.Settings(
            console="off",  # the trainer's lines are the pod's log; W&B must not wrap its streams
            finish_timeout=CLOSE_WAIT_S,
            silent=True,
        )
        run = wandb.init(project=self.project, name=self.run_name, id=run_id, resume="allow", dir=str(self.run_dir),
                         config=self.flags, settings=settings)  # fmt: skip
        if not stored:
            write_json(run_file, {"id": run_id, "project": self.project})
        where = "offline, to sync later" if run.settings.mode == "offline" else run.url or run.settings.base_url
        say(f"W&B: run {run_id} in project {self.project!r} ({where}), files under {self.run_dir / 'wandb'}")
        return run

    @staticmethod
    def _log(step: int, figures: dict[str, float], run) -> None:
        # a resumed run already has every step before starting_step, the same figures after an exact resume
        if step >= run.starting_step:
            run.log(figures, step=step)

    @staticmethod
    def _end(status: str, result: dict, run) -> None:
        if result:
            run.summary.update({f"result/{k}": v for k, v in result.items()})
        if status == KILLED:
            run.mark_preempting()  # stopped to be resumed: W&B shows it preempted, not failed
        run.finish(exit_code=EXIT_CODES[status])
