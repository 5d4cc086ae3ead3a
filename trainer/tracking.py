"""Sends a run's figures to trackers: a loss curve, TensorBoard event files, and an MLflow server when one is named.

Rank 0 alone tracks. The loop hands over the figures it logs, as numbers: each `[TRAIN]` line's
(trainer/lines.py's TrainLine.figures, at the precision the line prints) and each epoch's metrics
record. Steps are global optimizer steps. A restart must not draw a step twice:
TensorBoard is told to drop what an earlier start logged from the resumed step on (`purge_step`),
and MLflow, which cannot drop a point, is not sent a step its run already has.

- The loss curve: `<run dir>/loss.png` (trainer/loss_curve.py), redrawn at each epoch end. The `[TRAIN]`
  series it draws is kept in `<run dir>/train-steps.jsonl`; a restart drops the records of the steps it redoes.
- TensorBoard: `<run dir>/tensorboard/`, one event file per start.
- MLflow (`MLFLOW_TRACKING_URI`, an http(s) server): over its REST API with the standard library,
  so the image needs no `mlflow` package. The run's id is kept in `<run dir>/mlflow-run.json`,
  so a resumed run logs into the same MLflow run.
"""

from __future__ import annotations

import base64
import json
import math
import os
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from functools import partial
from pathlib import Path
from typing import Any, Mapping

from trainer import console, loss_curve
from trainer import contract as c
from trainer.outputs import RunDir, write_json
from trainer.stop import StopRequest

TENSORBOARD_DIR = "tensorboard"
MLFLOW_RUN_FILE = "mlflow-run.json"
FINISHED, KILLED, FAILED = "FINISHED", "KILLED", "FAILED"
TRAIN, EPOCH = "train/", "epoch/"  # the prefixes of a [TRAIN] line's figures and of an epoch record's


def _numbers(record: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class Trackers:
    """What the loop talks to: the figures go to every tracker; the run's end sets its status.

    As a context manager, the run ends FINISHED, KILLED when an exception leaves while a SIGTERM is
    pending (the stop, or a collective failing as the stopping world goes), FAILED otherwise.
    """

    def __init__(self, sinks: list, stop: StopRequest | None = None):
        self.sinks, self.stop = sinks, stop
        self.result: dict[str, Any] = {}

    def log_train(self, step: int, figures: Mapping[str, float]) -> None:
        self._log(step, {f"{TRAIN}{k}": v for k, v in figures.items()})

    def log_epoch(self, record: Mapping[str, Any]) -> None:
        figures = _numbers({k: v for k, v in record.items() if k != "global_step"})
        self._log(record["global_step"], {f"{EPOCH}{k}": v for k, v in figures.items()})

    def log_result(self, summary: Mapping[str, Any]) -> None:
        if self.sinks:
            self.result = dict(summary)

    def _log(self, step: int, figures: dict[str, float]) -> None:
        for sink in self.sinks:
            sink.log(step, figures)

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, kind, _value, _traceback) -> None:
        status = FINISHED if kind is None else KILLED if self.stop and self.stop.requested else FAILED
        for sink in self.sinks:
            sink.close(status, self.result)


NO_TRACKERS = Trackers([])


def open_trackers(run_dir: Path, run_name: str, flags: Mapping[str, Any], resumed_step: int, stop: StopRequest) -> Trackers:
    """Rank 0's trackers for a run that resumes after `resumed_step` optimizer steps (0: a new run)."""
    env = os.environ
    sinks: list = [LossCurve.open(run_dir, run_name, first_step=resumed_step + 1)]
    tensorboard = TensorBoard.open(run_dir / TENSORBOARD_DIR, first_step=resumed_step + 1)
    if tensorboard:
        sinks.append(tensorboard)
    uri = env.get(c.MLFLOW_TRACKING_URI, "")
    if uri.startswith(("http://", "https://")):
        api = MlflowApi(uri, _authorization(env))
        experiment = env.get(c.MLFLOW_EXPERIMENT_NAME) or run_name
        sinks.append(MlflowRun(api, run_dir / MLFLOW_RUN_FILE, experiment, run_name, flags))
    elif uri:
        _say(f"MLflow: MLFLOW_TRACKING_URI={uri} is not an http(s) server, and this trainer speaks MLflow's REST API "
             f"only; serve that store with `mlflow server --backend-store-uri {uri}` and name the server instead. "
             f"Training goes on without MLflow")  # fmt: skip
    return Trackers(sinks, stop)


def _say(line: str) -> None:
    console.line(f"[TRACK] {line}")


# --- TensorBoard ------------------------------------------------------------------------------------
class TensorBoard:
    def __init__(self, writer):
        self.writer = writer

    @classmethod
    def open(cls, directory: Path, first_step: int) -> TensorBoard | None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:  # a user's image without tensorboard
            _say(f"TensorBoard: not installed ({error}); training goes on without event files")
            return None
        # purge_step: TensorBoard drops what earlier starts logged from first_step on, steps this start redoes
        writer = SummaryWriter(str(directory), purge_step=first_step)
        _say(f"TensorBoard: event files in {directory}")
        return cls(writer)

    def log(self, step: int, figures: dict[str, float]) -> None:
        for tag, value in figures.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()  # a crash then loses at most what came after the last [TRAIN] line

    def close(self, _status: str, _result: Mapping[str, Any]) -> None:
        self.writer.close()  # the epochs' scalars already end with the result


# --- the loss curve ---------------------------------------------------------------------------------
class LossCurve:
    """Keeps the `[TRAIN]` series in train-steps.jsonl and redraws loss.png after each epoch's record.

    A drawing that fails (an image without matplotlib, a value it cannot draw) is said once; training
    goes on, and each later epoch end tries again.
    """

    def __init__(self, run: RunDir, run_name: str):
        self.run, self.run_name = run, run_name
        self.said = False

    @classmethod
    def open(cls, run_dir: Path, run_name: str, first_step: int) -> LossCurve:
        run = RunDir(run_dir)
        run.root.mkdir(parents=True, exist_ok=True)  # the first [TRAIN] line can come before any other output
        run.forget_train_steps_from(first_step)  # this start redoes them: drawn once, with its figures
        return cls(run, run_name)

    def log(self, step: int, figures: dict[str, float]) -> None:
        if any(name.startswith(EPOCH) for name in figures):
            self._draw()  # the loop appended the epoch's record to metrics.jsonl before logging it
        else:
            self.run.append_train_step({"global_step": step, **{k.removeprefix(TRAIN): v for k, v in figures.items()}})

    def _draw(self) -> None:
        try:
            loss_curve.draw(self.run, self.run_name)
        except Exception as error:  # a picture must never stop training
            if not self.said:
                self.said = True
                _say(f"Loss curve: {loss_curve.PNG} not drawn ({type(error).__name__}: {error}); training goes on, "
                     f"and each later epoch end tries again")  # fmt: skip

    def close(self, _status: str, _result: Mapping[str, Any]) -> None:
        pass  # every record is on disk, the picture drawn at the last epoch end


# --- MLflow -----------------------------------------------------------------------------------------
# Requests go out from a thread of their own: rank 0 waiting on a slow or absent server would hold up
# every rank at its next collective. Figures wait in a buffer and go out together, in one request
# per log interval, or fewer when the server is slower than the intervals. Each request is tried up
# to ATTEMPTS times, BACKOFF_S apart (doubling); one that fails every try turns MLflow off for the
# rest of this process, with a line that says so, and the figures stay in TensorBoard and
# metrics.jsonl. A request the server refuses (4xx) is dropped, not tried again. At the run's end
# the process waits at most CLOSE_WAIT_S for what is still unsent (the default grace period after
# SIGTERM is 120 s, and the checkpoint comes first).
REQUEST_TIMEOUT_S = 30.0  # long: a request that timed out but was applied would be sent twice
ATTEMPTS = 4
BACKOFF_S = 1.0
CLOSE_WAIT_S = 30.0
MAX_METRICS_PER_REQUEST = 1000  # runs/log-batch's own limit
_FLUSH, _END = object(), object()


class Unreachable(Exception):
    """The server did not answer, or answered that it could not serve now (5xx, 429): worth a retry."""


class Refused(Exception):
    """The server answered no (4xx): the same request would be refused again."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code


class MlflowApi:
    def __init__(self, uri: str, authorization: str | None):
        self.uri = uri.rstrip("/")
        self.base = self.uri + "/api/2.0/mlflow/"
        self.headers = {"Content-Type": "application/json"}
        if authorization:
            self.headers["Authorization"] = authorization

    def get(self, path: str, **query: str) -> dict:
        return self._send(urllib.request.Request(self.base + path + "?" + urllib.parse.urlencode(query), headers=self.headers))

    def post(self, path: str, body: dict) -> dict:
        return self._send(urllib.request.Request(self.base + path, json.dumps(body).encode(), self.headers))

    def _send(self, request: urllib.request.Request) -> dict:
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            if error.code >= 500 or error.code == 429:
                raise Unreachable(f"HTTP {error.code}") from error
            try:
                answer = json.loads(error.read())
            except ValueError:
                answer = {}
            raise Refused(answer.get("error_code", f"HTTP {error.code}"), answer.get("message", error.reason)) from error
        except (urllib.error.URLError, OSError) as error:
            raise Unreachable(str(getattr(error, "reason", error))) from error


def _authorization(env: Mapping[str, str]) -> str | None:
    """The header MLflow's own clients send: a bearer token, or basic auth from a username and password."""
    if token := env.get(c.MLFLOW_TRACKING_TOKEN):
        return f"Bearer {token}"
    if user := env.get(c.MLFLOW_TRACKING_USERNAME):
        pair = f"{user}:{env.get(c.MLFLOW_TRACKING_PASSWORD, '')}".encode()
        return "Basic " + base64.b64encode(pair).decode()
    return None


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
            self.log(int(result["steps"]), {f"result/{k}": v for k, v in _numbers(result).items()})
            self.jobs.put(partial(self._tag_result, result))
        self.jobs.put(partial(self._end, status))
        self.jobs.put(_END)
        self.thread.join(CLOSE_WAIT_S)
        if self.thread.is_alive():
            _say(f"MLflow: requests still unsent after {CLOSE_WAIT_S:.0f}s at the run's end; leaving them")

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
                    _say(f"MLflow: {ATTEMPTS} tries failed ({error}); going on without MLflow for this process "
                         f"(the figures stay in TensorBoard and metrics.jsonl)")  # fmt: skip
                    return Unreachable
                self._warn(Unreachable, f"MLflow at {self.api.uri} unreachable ({error}); retrying, training goes on")
                time.sleep(delay)
                delay *= 2

    def _warn(self, kind: type, line: str) -> None:
        if kind not in self.warned:
            self.warned.add(kind)
            _say(line)

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
        _say(f"MLflow: run {self.run_id} in experiment {self.experiment!r} at {self.api.uri}")

    def _resume(self, run_id: str) -> bool:
        try:
            run = self.api.get("runs/get", run_id=run_id)["run"]
        except Refused as refused:
            if refused.code != "RESOURCE_DOES_NOT_EXIST":
                raise
            _say(f"MLflow: run {run_id} of {self.run_file} no longer exists; starting a new one")
            return False
        self.run_id = run_id
        self.logged_to = {m["key"]: int(m["step"]) for m in run.get("data", {}).get("metrics", [])}
        self.api.post("runs/update", {"run_id": run_id, "status": "RUNNING"})
        _say(f"MLflow: resuming run {run_id} at {self.api.uri}")
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
        tags = [{"key": f"result/{k}", "value": str(v)} for k, v in result.items() if k not in _numbers(result)]
        self.api.post("runs/log-batch", {"run_id": self.run_id, "tags": tags})

    def _end(self, status: str) -> None:
        self.api.post("runs/update", {"run_id": self.run_id, "status": status, "end_time": _now_ms()})


def _now_ms() -> int:
    return int(time.time() * 1000)
