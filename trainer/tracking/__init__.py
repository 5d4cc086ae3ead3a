"""Sends a run's figures to trackers: a loss curve, TensorBoard event files, and MLflow and W&B when they are named.

Rank 0 alone tracks. The loop hands over the figures it logs, as numbers: each `[TRAIN]` line's
(trainer/lines.py's TrainLine.figures, at the precision the line prints) and each epoch's metrics
record. Steps are global optimizer steps. A restart must not draw a step twice:
TensorBoard is told to drop what an earlier start logged from the resumed step on (`purge_step`),
and MLflow, which cannot drop a point, is not sent a step its run already has.

Each tracker is a file of this package, and each takes `log(step, figures)` and `close(status, result)`:

- the fan-out to all of them, and the run's status at its end (fan_out.py);
- the loss curve: `<run dir>/loss.png` (loss_curve.py), redrawn at an epoch end (at most once a minute) and at the run's end. The `[TRAIN]`
  series it draws is kept in `<run dir>/train-steps.jsonl`; a restart drops the records of the steps it redoes;
- TensorBoard: `<run dir>/tensorboard/`, one event file per start (tensorboard_events.py);
- MLflow (`MLFLOW_TRACKING_URI`, an http(s) server): the run (mlflow_run.py), over MLflow's REST API
  with a client of the standard library (mlflow_client.py, which says why), so the image needs no
  `mlflow` package. The run's id is kept in `<run dir>/mlflow-run.json`, so a resumed run logs into
  the same MLflow run.
- Weights & Biases (`WANDB_API_KEY`, or `WANDB_MODE=offline`): the run (wandb_run.py), through W&B's
  own client, its id kept in `<run dir>/wandb-run.json` and its files under `<run dir>/wandb/`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from trainer import contract as c
from trainer.stop import StopRequest
from trainer.tracking.fan_out import NO_TRACKERS, Trackers, say
from trainer.tracking.loss_curve import LossCurve
from trainer.tracking.mlflow_client import MlflowApi, authorization
from trainer.tracking.mlflow_run import MLFLOW_RUN_FILE, MlflowRun
from trainer.tracking.tensorboard_events import TENSORBOARD_DIR, TensorBoard
from trainer.tracking.wandb_run import WANDB_RUN_FILE, WandbRun, wanted

__all__ = ["MLFLOW_RUN_FILE", "NO_TRACKERS", "TENSORBOARD_DIR", "WANDB_RUN_FILE", "Trackers", "open_trackers"]


def open_trackers(run_dir: Path, run_name: str, flags: Mapping[str, Any], resumed_step: int, stop: StopRequest) -> Trackers:
    """Rank 0's trackers for a run that resumes after `resumed_step` optimizer steps (0: a new run)."""
    env = os.environ
    sinks: list = [LossCurve.open(run_dir, run_name, first_step=resumed_step + 1)]
    tensorboard = TensorBoard.open(run_dir / TENSORBOARD_DIR, first_step=resumed_step + 1)
    if tensorboard:
        sinks.append(tensorboard)
    uri = env.get(c.MLFLOW_TRACKING_URI, "")
    if uri.startswith(("http://", "https://")):
        api = MlflowApi(uri, authorization(env))
        experiment = env.get(c.MLFLOW_EXPERIMENT_NAME) or run_name
        sinks.append(MlflowRun(api, run_dir / MLFLOW_RUN_FILE, experiment, run_name, flags))
    elif uri:
        say(f"MLflow: MLFLOW_TRACKING_URI={uri} is not an http(s) server, and this trainer speaks MLflow's REST API "
            f"only; serve that store with `mlflow server --backend-store-uri {uri}` and name the server instead. "
            f"Training goes on without MLflow")  # fmt: skip
    if wanted(env):
        sinks.append(WandbRun(run_dir, run_name, flags))
    return Trackers(sinks, stop)
