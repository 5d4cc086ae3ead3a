"""The demo's and the status view's reading of rank 0's lines, against the lines a real trainer prints:
the env contract's counterpart for the log (both sides read and write them with trainer/lines.py)."""

from __future__ import annotations

import io
import re
from datetime import datetime, timezone

import pytest

from demo.__main__ import result_words
from observe import rank0_log as log
from observe.follow import Follower
from observe.progress import CLEAR_LINE, Progress
from toolchain.apiserver import free_port
from trainer.lines import CheckpointSaved, DoneLine, TrainLine, key_values, tagged
from trainer_testing import clean_env, entrypoint_command, pod_env, run_to_end

EPOCHS, STEPS, LOG_EVERY = 2, 8, 2  # 4096 samples in batches of 256 on 2 processes: 8 steps an epoch


@pytest.fixture(scope="module")
def trainer_log(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("out")
    args = ["-m", "trainer.train", "smoke", "--epochs", str(EPOCHS), "--batch", "256", "--samples", "4096", "--features", "32",
            "--classes", "4", "--seed", "3", "--log-every", str(LOG_EVERY), "--checkpoint-every", "4"]  # fmt: skip
    env = clean_env(**pod_env("demo-0", free_port(), nnodes=1, nproc=2), OUT_DIR=str(out))
    code, text = run_to_end(entrypoint_command(args), env, out / "trainer.log", timeout=240)
    assert code == 0, text[-4000:]
    return text


def test_every_train_line_reads_as_the_figures_it_prints(trainer_log):
    rows = tagged(trainer_log, TrainLine.TAG)
    assert len(rows) == EPOCHS * STEPS // LOG_EVERY
    for row in rows:
        figures, printed = TrainLine.parse(row), key_values(row)
        assert f"{figures.epoch}/{figures.epochs}" == printed["epoch"]
        assert f"{figures.step}/{figures.steps}" == printed["step"]
        assert figures.global_step == int(printed["global_step"]) and figures.loss == float(printed["loss"])
        assert figures.unit == "samples" and figures.rate == float(printed["samples/s"])
        assert figures.text() == row, "read back, it writes the same line"
    last = TrainLine.parse(rows[-1])
    assert (last.epochs, last.steps, last.global_step, last.steps_left) == (EPOCHS, STEPS, EPOCHS * STEPS, 0)
    assert TrainLine.parse(rows[0]).steps_left == EPOCHS * STEPS - LOG_EVERY


def test_the_newest_checkpoint_is_the_last_saved_one_with_its_time(trainer_log):
    saved = [(line.checkpoint, line.step) for row in trainer_log.splitlines() if (line := CheckpointSaved.parse(row))]
    assert [step for _, step in saved] == [4, 8, 12, 16]
    # as `kubectl logs --timestamps` prints them: RFC 3339 with nanoseconds
    stamped = "".join(f"2026-11-25T08:00:{second:02d}.123456789Z {row}\n" for second, row in enumerate(trainer_log.splitlines()))
    newest = log.newest_checkpoint(stamped)
    assert (newest.name, newest.step) == saved[-1]
    assert newest.saved_at.tzinfo is not None and newest.saved_at < datetime(2026, 11, 25, 8, 1, tzinfo=timezone.utc)
    assert log.newest_checkpoint("") is None


def test_progress_draws_a_bar_per_line_with_the_eta_from_the_world_s_pace(trainer_log):
    rows = tagged(trainer_log, TrainLine.TAG)
    clock = iter(float(second) for second in range(100))  # one line a second: LOG_EVERY steps a second
    out = io.StringIO()
    progress = Progress(out, terminal=False, clock=lambda: next(clock))
    for row in rows:
        progress.train(TrainLine.parse(row))
    drawn = out.getvalue().splitlines()
    assert len(drawn) == len(rows)
    assert drawn[0].startswith(f"epoch 1/{EPOCHS} ") and drawn[0].endswith("ETA …")
    # after the second line: 2 steps a second, 4 steps of the epoch and 12 of the run left
    assert f" {2 * LOG_EVERY}/{STEPS} steps · " in drawn[1] and drawn[1].endswith("ETA 0:00:02 (run 0:00:06)")
    assert drawn[-1].startswith(f"epoch {EPOCHS}/{EPOCHS} {'█' * 24} {STEPS}/{STEPS} steps")


def test_a_new_world_starts_the_eta_again_and_lines_print_above_the_bar_on_a_terminal(trainer_log):
    rows = [TrainLine.parse(row) for row in tagged(trainer_log, TrainLine.TAG)]
    out = io.StringIO()
    progress = Progress(out, terminal=True, clock=iter([0.0, 1.0, 50.0]).__next__)
    progress.train(rows[0])
    progress.train(rows[1])
    progress.world_changed()
    progress.say("[re-form] resumed")
    progress.train(rows[2])
    text = out.getvalue()
    assert "\n" not in text.replace(f"{CLEAR_LINE}[re-form] resumed\n", "")  # the bar is redrawn in place
    assert text.endswith("ETA …")  # the new world's pace is not known from one line


def test_the_hang_watch_s_verdict_is_said_in_one_line():
    out = io.StringIO()
    follower = Follower(kubectl=None, world=None, out=out)
    verdict = ("[HANG] no training progress for 36 s (bound 30 s) after global step 17: rank 1 stopped running "
               "(no heartbeat): rank 1 in pod trainer-1 (at global step 17 or later: its last heartbeat's); rank 0 ends the world")  # fmt: skip
    follower._line(verdict)
    assert out.getvalue() == f"[hang] {verdict[len('[HANG] '):]}\n"


def test_the_follower_says_what_a_real_log_says_and_keeps_rank_0_s_result(trainer_log):
    out = io.StringIO()
    follower = Follower(kubectl=None, world=None, out=out)
    for row in trainer_log.splitlines():
        follower._line(row)
    said = [row for row in out.getvalue().splitlines() if not row.startswith("epoch ")]  # the bars aside
    epochs = [row.removeprefix("[EPOCH] ") for row in tagged(trainer_log, "[EPOCH]")]
    assert said == ["[wait] rendezvous: torchrun waits for every pod of the world to join",
                    "[start] no checkpoint yet: the world trains from the start", *(f"[epoch] {e}" for e in epochs)], said
    (rank_0,) = [line for row in tagged(trainer_log, DoneLine.TAG) if (line := DoneLine.parse(row)).rank == 0]
    assert follower.done == rank_0 and follower.done.steps == EPOCHS * STEPS


def test_the_demo_says_rank_0_s_result_as_it_always_has():
    done = DoneLine.parse("[DONE] rank=0 epochs=2 train_loss=0.7459167316555977 val_loss=0.7903023362159729 "
                          "val_ppl=2.2040626935070238 best=epoch-2 run=a steps=32 params_sum=-0.9125986515118711 seconds=3.605")  # fmt: skip
    assert result_words(done) == "epochs=2 train_loss=0.7459 val_loss=0.7903 val_ppl=2.2041 best=epoch-2 run=a steps=32 seconds=3.6050"


def test_a_failed_worker_s_error_is_kept_however_long_torchrun_s_own_traceback_after_it(tmp_path):
    """Rank 0's agent may end in a long traceback of its own (the rendezvous closed by another pod's agent
    as it restarts its workers): the worker's error, the cause, must not scroll out of what is kept."""
    env = clean_env(**pod_env("demo-0", free_port(), nnodes=1, nproc=1), OUT_DIR=str(tmp_path))
    code, text = run_to_end(entrypoint_command(["-m", "trainer.no_such_task"]), env, tmp_path / "trainer.log", timeout=120)
    assert code != 0 and "No module named trainer.no_such_task" in text, text[-4000:]
    agent_end = ["Traceback (most recent call last):"] + [f'  File "/opt/venv/lib/agent.py", line {n}, in step{n}\n    step{n + 1}()'
                                                          for n in range(60)]  # fmt: skip
    agent_end.append("torch.distributed.elastic.rendezvous.api.RendezvousClosedError")
    follower = Follower(kubectl=None, world=None, out=io.StringIO())
    for row in (text + "\n".join(agent_end)).splitlines():
        follower._line(row)
    error = follower.worker_error
    assert error[0].startswith("failed (exitcode: 1) local_rank: 0") and error[-1] == "ImportError: No module named trainer.no_such_task", error
    assert not any(re.match(r"E\d{4} ", row) for row in error), "torchrun's log header is left out"
    assert follower.recent[-1] == agent_end[-1]
