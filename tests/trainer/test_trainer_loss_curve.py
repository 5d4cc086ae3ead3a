"""The loss curve: rank 0 draws /out/<run>/loss.png at an epoch end (at most once a minute) and at the
run's end from metrics.jsonl and the `[TRAIN]` series it keeps in train-steps.jsonl, through stops and
crashes, and never stands in training's way."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
from PIL import Image
from test_trainer_tracking import ARGS, STEPS, run_without, run_world, start_world, train_lines_by_step
from trainer_testing import epoch_records

from trainer.tracking import loss_curve
from trainer.tracking.fan_out import EPOCH, FINISHED, TRAIN
from trainer.lines import tagged
from trainer.outputs import TRAIN_STEPS, RunDir
from trainer.stop import EXIT_STOPPED


def step_records(run: Path) -> list[dict]:
    return [json.loads(row) for row in (run / TRAIN_STEPS).read_text().splitlines()]


def points_drawn(run: Path) -> dict[str, int]:
    """What the PNG says it drew, after checking that it is a picture with something on it."""
    with Image.open(run / loss_curve.PNG) as image:
        image.load()
        assert image.format == "PNG" and image.width > 100 and image.height > 100
        darkest, lightest = image.convert("L").getextrema()
        assert darkest < lightest, "a blank, single-colour image"
        points = image.text[loss_curve.POINTS_KEY]
    return {key: int(value) for key, value in (field.split("=") for field in points.split())}


def assert_no_temp_files(run: Path) -> None:
    assert not [path.name for path in run.iterdir() if ".tmp-" in path.name]


def test_a_resume_drops_the_steps_it_redoes_and_a_torn_last_record(tmp_path):
    run = RunDir(tmp_path)
    for step in (3, 6, 9):
        run.append_train_step({"global_step": step, "loss": 1.0})
    with open(run.train_steps, "a") as file:
        file.write('{"global_step": 12, "lo')  # a crash in the middle of an append

    run.forget_train_steps_from(7)  # resumed from step 6's checkpoint

    assert [record["global_step"] for record in step_records(tmp_path)] == [3, 6]


def test_a_torn_step_record_before_the_last_is_an_error_that_names_the_file_and_line(tmp_path):
    run = RunDir(tmp_path)
    run.append_train_step({"global_step": 3, "loss": 1.0})
    with open(run.train_steps, "a") as file:
        file.write('{"global_step": 6, "lo\n')
    run.append_train_step({"global_step": 9, "loss": 1.0})

    with pytest.raises(ValueError, match=re.escape(f"{run.train_steps} line 2: not a whole JSON record")):
        run.forget_train_steps_from(10)


def epoch_record(run: RunDir, curve: loss_curve.LossCurve, epoch: int, step: int) -> None:
    """What the loop does at an epoch's end: the record in metrics.jsonl, then its figures logged."""
    run.append_metrics({"epoch": epoch, "global_step": step, "train_loss": 1.0 / epoch, "val_loss": 2.0 / epoch})
    curve.log(step, {f"{EPOCH}train_loss": 1.0 / epoch, f"{EPOCH}val_loss": 2.0 / epoch})


def test_the_curve_is_redrawn_at_an_epoch_end_at_most_once_a_minute_and_at_the_runs_end(tmp_path):
    now = [1000.0]
    run = RunDir(tmp_path)
    curve = loss_curve.LossCurve(run, "r", clock=lambda: now[0])
    for epoch in range(1, 5):  # epochs of 20 s: drawn at the first end, then once 60 s have passed
        for step in range(epoch * 4 - 3, epoch * 4 + 1):
            curve.log(step, {f"{TRAIN}loss": 1.0 / step})
        epoch_record(run, curve, epoch, epoch * 4)
        assert points_drawn(tmp_path) == ({"steps": 4, "epochs": 1} if epoch < 4 else {"steps": 16, "epochs": 4})
        now[0] += 20
    curve.log(17, {f"{TRAIN}loss": 0.5})
    curve.close(FINISHED, {})
    assert points_drawn(tmp_path) == {"steps": 17, "epochs": 4}, "the run's end draws what came since"
    drawn = (tmp_path / loss_curve.PNG).stat().st_mtime_ns
    curve.close(FINISHED, {})
    assert (tmp_path / loss_curve.PNG).stat().st_mtime_ns == drawn, "nothing new, nothing drawn"


@pytest.mark.timeout(300)
def test_rank_0_draws_the_curve_again_when_stopped_and_a_resumed_run_adds_to_it(spawn, tmp_path):
    # a world of 2 with 8 steps an epoch: SIGTERM in step 11 stops it in epoch 2, after epoch 1's curve
    first = run_world(spawn, tmp_path, "stopped", world=2, expected=EXIT_STOPPED, PROBE_SIGNAL_AT="11")
    run = tmp_path / "run"
    (epoch_1,) = epoch_records(run)
    steps = step_records(run)
    assert [r["global_step"] for r in steps] == sorted(train_lines_by_step(first)), "a record per rank 0 [TRAIN] line"
    assert steps[-1]["global_step"] > epoch_1["global_step"], "the stop came after epoch 1's end and later [TRAIN] lines"
    assert points_drawn(run) == {"steps": len(steps), "epochs": 1}, "drawn at the stop with the steps after epoch 1"

    again = run_world(spawn, tmp_path, "resumed", world=2, expected=0)
    lines = {**train_lines_by_step(first), **train_lines_by_step(again)}
    steps = step_records(run)
    assert [r["global_step"] for r in steps] == sorted(lines)
    assert [r["loss"] for r in steps] == [float(lines[r["global_step"]]["loss"]) for r in steps]
    assert len(epoch_records(run)) == 2
    assert points_drawn(run) == {"steps": len(steps), "epochs": 2}
    assert_no_temp_files(run)


@pytest.mark.timeout(300)
def test_steps_redone_after_a_crash_are_drawn_once_with_the_resumed_figures(spawn, tmp_path):
    """SIGKILL in step 8 with a checkpoint at step 4: steps 5-7 were recorded, and are trained again."""
    args = [*ARGS, "--log-every", "1"]  # the later flag wins
    crash = dict(PROBE_SIGNAL_AT="8", PROBE_SIGNAL="SIGKILL", PROBE_AWAIT_CHECKPOINT="4")
    procs = start_world(spawn, tmp_path, "crashed", 1, args, **crash)
    assert procs[0].wait(120) == -signal.SIGKILL, procs[0].text()[-3000:]
    run = tmp_path / "run"
    assert [r["global_step"] for r in step_records(run)] == list(range(1, 8))
    assert not (run / loss_curve.PNG).exists(), "no epoch has ended yet"

    procs = start_world(spawn, tmp_path, "resumed", 1, args)
    assert procs[0].wait(120) == 0, procs[0].text()[-3000:]
    assert "[CKPT] resumed from ckpt-00000004:" in procs[0].text()
    resumed = train_lines_by_step(procs[0].text())
    steps = step_records(run)
    assert [r["global_step"] for r in steps] == list(range(1, STEPS[1] + 1))
    assert [r["loss"] for r in steps[4:7]] == [float(resumed[step]["loss"]) for step in (5, 6, 7)]
    assert points_drawn(run) == {"steps": STEPS[1], "epochs": 2}


@pytest.mark.timeout(120)
def test_without_matplotlib_training_goes_on_and_says_so_once(tmp_path):
    code, text = run_without(tmp_path, "matplotlib")
    assert code == 0, text[-4000:]
    assert "[DONE]" in text and len(tagged(text, "[EPOCH]")) == 2
    warnings = [line for line in tagged(text, "[TRACK]") if "Loss curve" in line]
    assert len(warnings) == 1 and "no matplotlib in this image" in warnings[0], text[-4000:]
    run = tmp_path / "run"
    assert not (run / loss_curve.PNG).exists()
    assert [r["global_step"] for r in step_records(run)] == sorted(train_lines_by_step(text)), "the series is kept"
    assert_no_temp_files(run)
