"""One MLflow run for the whole training run, resumed across restarts.

Requests go out from a thread of their own: rank 0 waiting on a slow or absent server would hold up
every rank at its next collective. Figures wait in a buffer and go out together, in one request
per log interval, or fewer when the server is slower than the intervals. Each request is tried up
to ATTEMPTS times, BACKOFF_S apart (doubling); one that fails every try turns MLflow off for the
rest of this process, with a line that says so, and the figures stay in TensorBoard and
metrics.jsonl. A request the server refuses (4xx) is dropped, not tried again. At the run's end
the process waits at most CLOSE_WAIT_S for what is still unsent (the default grace period after
SIGTERM is 120 s, and the checkpoint comes first).
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any, Mapping

from trainer.outputs import write_json
from trainer.tracking.fan_out import numbers, say
from trainer.tracking.mlflow_client import MlflowApi, Refused, Unreachable

MLFLOW_RUN_FILE = "mlflow-run.json"
ATTEMPTS = 4
BACKOFF_S = 1.0
CLOSE_WAIT_S = 30.0
MAX_METRICS_PER_REQUEST = 1000  # runs/log-batch's own limit
_FLUSH, _END = object(), object()


class MlflowRun:
    """One MLflow run for the whole training run, resumed across restarts."""

    def __init__(self, api: MlflowApi, run_file: Path, experiment: str, run_name: str, flags: Mapping[str, Any]):
        self.api, self.run_file, self.experiment, self.run_name = api, run_file, experiment, run_name
        self.flags = {k: str(v) for k, v in flags.items()}
        self.run_id = ""
        self.new_run = False
        self.logged_to: dict[str, int] = {}  # per metric, the last step the run already had when this start opened it
        self.unsent: list[dict] = []  # metrics the thread has not taken yet
        self.lock = threading.Lock()
        self.jobs: queue.Queue = queue.Queue()
        self.warned: set[type] = set()  # the kinds of failure already reported: one line each
        self.thread = threading.Thread(target=self._work, name="mlflow", daemon=True)
        self.thread.start()

    # called by the training loop: each returns at once
    def log(self, step: int, figures: dict[str, float]) -> None:
        now = _now_ms()
        # MLflow's JSON has no NaN or infinity: such a figure (a diverged loss) stays in TensorBoard only
        metrics = [{"key": k, "value": v, "timestamp": now, "step": step} for k, v in figures.items() if math.isfinite(v)]
        with self.lock:
            self.unsent += metrics
        self.jobs.put(_FLUSH)

    def close(self, status: str, result: Mapping[str, Any]) -> None:
        if result:
            self.log(int(result["steps"]), {f"result/{k}": v for k, v in numbers(result).items()})
            self.jobs.put(partial(self._tag_result, result))
        self.jobs.put(partial(self._end, status))
        self.jobs.put(_END)
        self.thread.join(CLOSE_WAIT_S)
        if self.thread.is_alive():
            say(f"MLflow: requests still unsent after {CLOSE_WAIT_S:.0f}s at the run's end; leaving them")

    # the thread
    def _work(self) -> None:
        on = self._attempt(self._open) is None  # without a run there is nothing to log into
        if on and self.new_run:
            on = self._attempt(self._log_params) is not Unreachable
        while (job := self.jobs.get()) is not _END:
            if job is _FLUSH:
                metrics = self._take_unsent()
                if not metrics:
                    continue  # an earlier flush took them
                job = partial(self._post_metrics, metrics)
            on = on and self._attempt(job) is not Unreachable

    def _take_unsent(self) -> list[dict]:
        """Up to a request's worth of metrics, without the steps a crashed start already sent.

        After an exact resume those steps hold the same figures, and MLflow cannot drop a point.
        """
        with self.lock:
            taken, self.unsent = self.unsent[:MAX_METRICS_PER_REQUEST], self.unsent[MAX_METRICS_PER_REQUEST:]
        return [m for m in taken if m["step"] > self.logged_to.get(m["key"], -1)]

    def _attempt(self, request) -> type | None:
        """Send one request with its retries; the kind of failure it ended in, if any."""
        delay = BACKOFF_S
        for attempt in range(1, ATTEMPTS + 1):
            try:
                request()
                return None
            except Refused as refused:
                self._warn(Refused, f"MLflow at {self.api.uri} refused a request ({refused}); dropping it")
                return Refused
            except Unreachable as error:
                if attempt == ATTEMPTS:
                    say(f"MLflow: {ATTEMPTS} tries failed ({error}); going on without MLflow for this process "
                        f"(the figures stay in TensorBoard and metrics.jsonl)")  # fmt: skip
                    return Unreachable
                self._warn(Unreachable, f"MLflow at {self.api.uri} unreachable ({error}); retrying, training goes on")
                time.sleep(delay)
                delay *= 2

    def _warn(self, kind: type, line: str) -> None:
        if kind not in self.warned:
            self.warned.add(kind)
            say(line)

    def _open(self) -> None:
        """Resume the run this run directory logged into before, or create one."""
        stored = json.loads(self.run_file.read_text()) if self.run_file.exists() else {}
        if stored.get("tracking_uri") == self.api.uri and self._resume(stored["run_id"]):
            return
        experiment_id = self._experiment_id()
        run = self.api.post("runs/create", {"experiment_id": experiment_id, "run_name": self.run_name, "start_time": _now_ms()})
        self.run_id = run["run"]["info"]["run_id"]
        self.new_run = True
        write_json(self.run_file, {"tracking_uri": self.api.uri, "experiment_id": experiment_id, "run_id": self.run_id})
        say(f"MLflow: run {self.run_id} in experiment {self.experiment!r} at {self.api.uri}")

    def _resume(self, run_id: str) -> bool:
        try:
            run = self.api.get("runs/get", run_id=run_id)["run"]
        except Refused as refused:
            if refused.code != "RESOURCE_DOES_NOT_EXIST":
                raise
            say(f"MLflow: run {run_id} of {self.run_file} no longer exists; starting a new one")
            return False
        self.run_id = run_id
        self.logged_to = {m["key"]: int(m["step"]) for m in run.get("data", {}).get("metrics", [])}
        self.api.post("runs/update", {"run_id": run_id, "status": "RUNNING"})
        say(f"MLflow: resuming run {run_id} at {self.api.uri}")
        return True

    def _experiment_id(self) -> str:
        try:
            return self.api.get("experiments/get-by-name", experiment_name=self.experiment)["experiment"]["experiment_id"]
        except Refused as refused:
            if refused.code != "RESOURCE_DOES_NOT_EXIST":
                raise
        return self.api.post("experiments/create", {"name": self.experiment})["experiment_id"]

    def _log_params(self) -> None:
        # once, for a new run: MLflow refuses to change a param, and a resumed run keeps the flags it started with
        params = [{"key": k, "value": v} for k, v in self.flags.items()]
        self.api.post("runs/log-batch", {"run_id": self.run_id, "params": params})

    def _post_metrics(self, metrics: list[dict]) -> None:
        self.api.post("runs/log-batch", {"run_id": self.run_id, "metrics": metrics})

    def _tag_result(self, result: Mapping[str, Any]) -> None:
        """The result's words (which epoch is best); its numbers went out as metrics."""
        tags = [{"key": f"result/{k}", "value": str(v)} for k, v in result.items() if k not in numbers(result)]
        self.api.post("runs/log-batch", {"run_id": self.run_id, "tags": tags})

    def _end(self, status: str) -> None:
        self.api.post("runs/update", {"run_id": self.run_id, "status": status, "end_time": _now_ms()})


def _now_ms() -> int:
    return int(time.time() * 1000)
