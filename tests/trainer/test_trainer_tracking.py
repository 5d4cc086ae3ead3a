"""Run tracking: TensorBoard events read back with tensorboard's own reader, a local MLflow server
(SQLite store) receiving the run over its REST API, and W&B's offline run files, through stops,
crashes and absent servers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from waiting import wait_for
from trainer_testing import PYTHON, REPO, clean_env, done_lines, epoch_records, free_port, kill_tree, run_to_end, train_lines
from wandb_records import offline_runs

from trainer import tracking
from trainer.lines import tagged
from trainer.stop import EXIT_STOPPED

PROBE = str(Path(__file__).with_name("signal_probe.py"))
# 2 epochs of 16 steps in a world of one (512 samples, batch 32), of 8 in a world of two
ARGS = ["smoke", "--epochs", "2", "--batch", "32", "--samples", "512", "--features", "16", "--hidden", "32",
        "--classes", "4", "--lr", "3e-3", "--seed", "7", "--log-every", "3", "--checkpoint-every", "4",
        "--device", "cpu", "--pg-timeout", "60"]  # fmt: skip
STEPS = {1: 32, 2: 16}  # by world size
TRAIN_TAGS = {"train/loss", "train/lr", "train/samples_per_s"}
EPOCH_TAGS = {"epoch/train_loss", "epoch/val_loss", "epoch/val_ppl", "epoch/samples_per_s"}


# --- running the trainer --------------------------------------------------------------------------
def start_world(spawn, out: Path, name: str, world: int, args: list[str] = ARGS, **extra: str) -> list:
    """Every rank of a world as a plain process (env:// rendezvous on loopback) running the signal probe."""
    port = str(free_port())
    procs = []
    for rank in range(world):
        ranks = dict(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        env = clean_env(**ranks, **extra)
        procs.append(spawn([PYTHON, PROBE, *args, "--out-dir", str(out), "--run-name", "run"], env, f"{name}-rank-{rank}"))
    return procs


def run_world(spawn, out: Path, name: str, world: int, expected: int, **extra: str) -> str:
    """Run a world to its end; return rank 0's log."""
    procs = start_world(spawn, out, name, world, **extra)
    codes = [proc.wait(180) for proc in procs]
    assert codes == [expected] * world, "\n".join(proc.text()[-3000:] for proc in procs)
    return procs[0].text()


def run_without(tmp_path: Path, *modules: str, **extra: str) -> tuple[int, str]:
    """A world of one run to its end as in an image without `modules`: importing one raises ImportError."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    for module in modules:
        (shadow / f"{module}.py").write_text(f"raise ImportError('no {module} in this image')\n")
    command = [PYTHON, "-m", "trainer.train", *ARGS, "--out-dir", str(tmp_path), "--run-name", "run"]
    env = clean_env(PYTHONPATH=os.pathsep.join([str(shadow), str(REPO)]), **extra)
    return run_to_end(command, env, tmp_path / "without.log", timeout=100)


def train_lines_by_step(text: str) -> dict[int, dict[str, str]]:
    """The [TRAIN] lines of a log by global step."""
    return {int(line["global_step"]): line for line in train_lines(text)}


# --- reading TensorBoard --------------------------------------------------------------------------
def scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the run as TensorBoard shows it: (step, value) by tag."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    accumulator = EventAccumulator(str(run / tracking.TENSORBOARD_DIR), size_guidance={SCALARS: 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def event_files(run: Path) -> list[Path]:
    return sorted((run / tracking.TENSORBOARD_DIR).glob("events.out.tfevents.*"))


def purge_steps(event_file: Path) -> list[int]:
    """Steps at which an event file tells TensorBoard to drop what earlier files logged from there on."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.proto.event_pb2 import SessionLog

    events = EventFileLoader(str(event_file)).Load()
    return [e.step for e in events if e.HasField("session_log") and e.session_log.status == SessionLog.START]


def steps_of(points: list[tuple[int, float]]) -> list[int]:
    return [step for step, _ in points]


def assert_points(points: list[tuple[int, float]], expected: list[tuple[int, float]], what: str) -> None:
    """The same steps and, to float32's precision (TensorBoard's), the same values."""
    assert steps_of(points) == steps_of(expected), what
    assert [value for _, value in points] == pytest.approx([value for _, value in expected], rel=1e-6), what


# --- a local MLflow server ------------------------------------------------------------------------
class Mlflow:
    def __init__(self, uri: str):
        self.uri = uri

    def call(self, path: str, body: dict | None = None, **query: str) -> dict:
        url = f"{self.uri}/api/2.0/mlflow/{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"{}")

    def run(self, run_id: str) -> dict:
        return self.call("runs/get", run_id=run_id)["run"]

    def history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        points = self.call("metrics/get-history", run_id=run_id, metric_key=key, max_results="10000")["metrics"]
        return sorted((point["step"], point["value"]) for point in points)

    def runs_of(self, experiment: str) -> list[dict]:
        experiment_id = self.call("experiments/get-by-name", experiment_name=experiment)["experiment"]["experiment_id"]
        return self.call("runs/search", {"experiment_ids": [experiment_id]}).get("runs", [])


@pytest.fixture(scope="module")
def mlflow(tmp_path_factory):
    """`mlflow server` on a SQLite store, up within a bounded wait; its whole process group dies at the end."""
    directory = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    command = [PYTHON, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{directory}/mlflow.db",
               "--default-artifact-root", str(directory / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1"]  # fmt: skip
    log = directory / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(command, cwd=directory, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}", server, log, timeout=150)
        yield Mlflow(f"http://127.0.0.1:{port}")
    finally:
        kill_tree(server.pid)
        server.wait(10)


def wait_until_healthy(uri: str, server: subprocess.Popen, log: Path, timeout: float) -> None:
    def healthy() -> bool:
        with urllib.request.urlopen(f"{uri}/health", timeout=5) as response:
            return response.status == 200

    def ended() -> str | None:
        return None if server.poll() is None else f"mlflow server exited ({server.poll()})"

    try:
        wait_for(healthy, timeout, "mlflow server healthy", interval=0.5, gone=ended, not_yet=(OSError,))
    except AssertionError as failed:
        raise AssertionError(f"{failed}:\n{log.read_text()[-4000:]}") from None


def stored_run_id(run: Path) -> str:
    return json.loads((run / tracking.MLFLOW_RUN_FILE).read_text())["run_id"]


def stored_wandb_id(run: Path) -> str:
    return json.loads((run / tracking.WANDB_RUN_FILE).read_text())["id"]


# --- tests ----------------------------------------------------------------------------------------
@pytest.mark.timeout(300)
def test_a_run_writes_tensorboard_events_and_its_mlflow_run_from_rank_0(spawn, tmp_path, mlflow):
    api_key = "wandb-key-" + "7" * 30  # the secretEnv a stack hands the pods; offline, W&B keeps the run here
    text = run_world(spawn, tmp_path, "whole", world=2, expected=0, MLFLOW_TRACKING_URI=mlflow.uri,
                     MLFLOW_EXPERIMENT_NAME="whole-runs", WANDB_MODE="offline", WANDB_API_KEY=api_key)  # fmt: skip
    run = tmp_path / "run"
    lines, records = train_lines_by_step(text), epoch_records(run)
    assert len(event_files(run)) == 1, "rank 0 alone writes events"

    shown = scalars(run)
    assert TRAIN_TAGS | EPOCH_TAGS <= set(shown)
    for tag, field in (("train/loss", "loss"), ("train/lr", "lr"), ("train/samples_per_s", "samples/s")):
        assert_points(shown[tag], [(step, float(line[field])) for step, line in lines.items()], tag)
    for tag, key in (("epoch/val_loss", "val_loss"), ("epoch/val_ppl", "val_ppl"), ("epoch/train_loss", "train_loss")):
        assert_points(shown[tag], [(r["global_step"], r[key]) for r in records], tag)
    assert [r["global_step"] for r in records] == [8, 16]

    (found,) = mlflow.runs_of("whole-runs")
    run_id = stored_run_id(run)
    assert found["info"]["run_id"] == run_id
    info, data = mlflow.run(run_id)["info"], mlflow.run(run_id)["data"]
    assert info["status"] == "FINISHED"
    params = {p["key"]: p["value"] for p in data["params"]}
    assert (params["epochs"], params["batch"], params["lr"], params["samples"]) == ("2", "32", "0.003", "512")
    assert mlflow.history(run_id, "train/loss") == [(step, float(line["loss"])) for step, line in lines.items()]
    assert mlflow.history(run_id, "epoch/val_loss") == [(r["global_step"], r["val_loss"]) for r in records]
    done = done_lines(text)
    assert mlflow.history(run_id, "result/val_loss") == [(STEPS[2], records[-1]["val_loss"])], done

    (offline,) = offline_runs(run)  # rank 0's alone
    assert (offline.run_id, offline.project) == (stored_wandb_id(run), "run")
    assert (offline.config["epochs"], offline.config["batch"], offline.config["lr"]) == (2, 32, 0.003)
    assert {step: figures["train/loss"] for step, figures in offline.history.items() if "train/loss" in figures} == {
        step: float(line["loss"]) for step, line in lines.items()}  # fmt: skip
    assert {step: figures["epoch/val_loss"] for step, figures in offline.history.items() if "epoch/val_loss" in figures} == {
        r["global_step"]: r["val_loss"] for r in records}  # fmt: skip
    assert (offline.summary["result/val_loss"], offline.summary["result/best"]) == (records[-1]["val_loss"], "epoch-2")
    assert (offline.exit_code, offline.preempting) == (0, False)
    assert api_key not in text and not [path for path in run.rglob("*") if path.is_file() and api_key.encode() in path.read_bytes()]


@pytest.mark.timeout(300)
def test_a_run_stopped_by_sigterm_resumes_its_events_and_mlflow_run_without_duplicate_steps(spawn, tmp_path, mlflow):
    extra = dict(MLFLOW_TRACKING_URI=mlflow.uri, MLFLOW_EXPERIMENT_NAME="stopped-runs", WANDB_MODE="offline")
    first = run_world(spawn, tmp_path, "stopped", world=2, expected=EXIT_STOPPED, PROBE_SIGNAL_AT="5", **extra)
    run = tmp_path / "run"
    run_id = stored_run_id(run)
    assert mlflow.run(run_id)["info"]["status"] == "KILLED"

    again = run_world(spawn, tmp_path, "resumed", world=2, expected=0, **extra)
    assert "[CKPT] resumed from ckpt-00000006:" in again  # SIGTERM in step 5, answered at the next sync (--log-every 3)
    assert stored_run_id(run) == run_id and len(mlflow.runs_of("stopped-runs")) == 1
    assert mlflow.run(run_id)["info"]["status"] == "FINISHED"

    logged = sorted({**train_lines_by_step(first), **train_lines_by_step(again)})
    assert len(event_files(run)) == 2, "one event file per start, from rank 0"
    shown = scalars(run)
    for tag in TRAIN_TAGS:
        assert steps_of(shown[tag]) == logged, tag
        assert steps_of(mlflow.history(run_id, tag)) == logged, tag
    assert steps_of(shown["epoch/val_loss"]) == steps_of(mlflow.history(run_id, "epoch/val_loss")) == [8, 16]

    stopped, resumed = offline_runs(run)  # one W&B offline run per start, both the same W&B run
    assert stopped.run_id == resumed.run_id == stored_wandb_id(run)
    assert (stopped.preempting, stopped.exit_code, resumed.exit_code) == (True, EXIT_STOPPED, 0)
    assert sorted(stopped.history) == sorted(train_lines_by_step(first)) and min(resumed.history) > 6  # ckpt 6
    assert sorted({*stopped.history, *resumed.history}) == sorted({*logged, 8, 16})


@pytest.mark.timeout(300)
def test_steps_redone_after_a_crash_are_shown_once_with_the_resumed_figures(spawn, tmp_path, mlflow):
    """SIGKILL in step 8 with a checkpoint at step 4: steps 5-7 were logged, and are trained again."""
    args = [*ARGS, "--log-every", "1"]  # the later flag wins
    extra = dict(MLFLOW_TRACKING_URI=mlflow.uri, MLFLOW_EXPERIMENT_NAME="crashed-runs")
    crash = dict(PROBE_SIGNAL_AT="8", PROBE_SIGNAL="SIGKILL", PROBE_AWAIT_MLFLOW="1", PROBE_AWAIT_CHECKPOINT="4")
    procs = start_world(spawn, tmp_path, "crashed", 1, args, **crash, **extra)
    assert procs[0].wait(120) == -signal.SIGKILL, procs[0].text()[-3000:]
    crashed = train_lines_by_step(procs[0].text())
    assert sorted(crashed) == list(range(1, 8))
    run = tmp_path / "run"
    run_id = stored_run_id(run)

    procs = start_world(spawn, tmp_path, "resumed", 1, args, **extra)
    assert procs[0].wait(120) == 0, procs[0].text()[-3000:]
    resumed = train_lines_by_step(procs[0].text())
    assert "[CKPT] resumed from ckpt-00000004:" in procs[0].text()
    assert sorted(resumed) == list(range(5, STEPS[1] + 1))

    older, newer = event_files(run)
    assert purge_steps(newer) == [5], "the resumed writer drops what the crashed one logged from step 5 on"
    shown = scalars(run)
    for tag in TRAIN_TAGS:
        assert steps_of(shown[tag]) == list(range(1, STEPS[1] + 1)), tag
    rates = dict(shown["train/samples_per_s"])
    redone = (5, 6, 7)
    assert [rates[step] for step in redone] == pytest.approx([float(resumed[step]["samples/s"]) for step in redone], rel=1e-6)

    assert stored_run_id(run) == run_id and len(mlflow.runs_of("crashed-runs")) == 1
    for tag in TRAIN_TAGS:
        assert steps_of(mlflow.history(run_id, tag)) == list(range(1, STEPS[1] + 1)), tag
    assert mlflow.run(run_id)["info"]["status"] == "FINISHED"


@pytest.mark.timeout(180)
def test_unreachable_mlflow_and_wandb_servers_do_not_stop_training(tmp_path):
    command = [PYTHON, "-m", "trainer.train", *ARGS, "--out-dir", str(tmp_path), "--run-name", "run"]
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = clean_env(MLFLOW_TRACKING_URI=nowhere, WANDB_BASE_URL=nowhere, WANDB_API_KEY="k" * 40, WANDB_INIT_TIMEOUT="5")
    code, text = run_to_end(command, env, tmp_path / "unreachable.log", timeout=150)
    assert code == 0, text[-4000:]
    assert "[DONE]" in text
    warnings = [line for line in tagged(text, "[TRACK]") if line.startswith("[TRACK] MLflow")]
    assert 1 <= len(warnings) <= 2, warnings  # the first failure, then giving up
    (wandb_gone,) = [line for line in tagged(text, "[TRACK]") if line.startswith("[TRACK] W&B")]
    assert "going on without W&B" in wandb_gone, wandb_gone
    assert steps_of(scalars(tmp_path / "run")["train/loss"]) == sorted(train_lines_by_step(text)), "TensorBoard goes on"


@pytest.mark.timeout(120)
def test_without_tensorboard_or_wandb_in_the_image_training_goes_on_and_says_so(tmp_path):
    code, text = run_without(tmp_path, "tensorboard", "wandb", WANDB_MODE="offline")
    assert code == 0, text[-4000:]
    assert len([line for line in tagged(text, "[TRACK]") if line.startswith("[TRACK] TensorBoard:")]) == 1
    assert not (tmp_path / "run" / tracking.TENSORBOARD_DIR).exists()
    (no_wandb,) = [line for line in tagged(text, "[TRACK]") if line.startswith("[TRACK] W&B")]
    assert "ImportError: no wandb in this image" in no_wandb, no_wandb
