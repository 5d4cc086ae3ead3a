"""The trainer's line vocabulary (trainer/lines.py): each kind writes exactly the text the trainer printed
before it had one (users grep these lines), and reads back into the record that wrote it."""

from __future__ import annotations

import math

import pytest

from trainer.checkpoint.record import CheckpointReason
from trainer.lines import (
    CheckpointNotSaved, CheckpointSaved, Compiled, DoneLine, EpochLine, NoCheckpoint, Resized, Resumed, Straggler, TrainLine,
)  # fmt: skip
from trainer.tracking import Trackers

VAL_LOSS = 0.7903023362159729

# Each record beside the text the loop's f-strings printed for the same figures (taken from them as they were).
TRAIN = TrainLine(1, 2, 3, 16, 3, 96, 1.38629436, 0.003, "samples", 1234.56, 617.28, 12.3456, 41.523,
                  (Straggler(1, "trainer-1", 23.45),))  # fmt: skip
TRAIN_TEXT = ("[TRAIN] epoch=1/2 step=3/16 global_step=3 samples=96 loss=1.3863 lr=3.000000e-03 samples/s=1235 "
              "per_process=617 step_ms=12.3 mfu=41.5% straggler=rank1@trainer-1(+23%)")  # fmt: skip
EPOCH = EpochLine(2, 4, 0.745916731, VAL_LOSS, math.exp(VAL_LOSS), "tokens", 4105.4, 2)
EPOCH_TEXT = "[EPOCH] 2/4 train_loss=0.7459 val_loss=0.7903023362159729 val_ppl=2.2041 tokens/s=4105 best=epoch-2"
DONE = DoneLine(1, 2, 0.7459167316555977, VAL_LOSS, math.exp(VAL_LOSS), "epoch-2", "a", 32, -0.9125986515118711, 3.605)
DONE_TEXT = ("[DONE] rank=1 epochs=2 train_loss=0.7459167316555977 val_loss=0.7903023362159729 val_ppl=2.2040626935070238 "
             "best=epoch-2 run=a steps=32 params_sum=-0.9125986515118711 seconds=3.605")  # fmt: skip
SAVED = CheckpointSaved("ckpt-00000032", CheckpointReason.EPOCH_END, 0.01312, 0.04203)
SAVED_TEXT = "[CKPT] saved ckpt-00000032 (epoch end): blocked the loop 0.0131s, written in 0.0420s"
RESUMED = Resumed("ckpt-00000012", "epoch 1 step 12/16 sample 768/1024", 12, CheckpointReason.SIGTERM)
RESUMED_TEXT = "[CKPT] resumed from ckpt-00000012: epoch 1 step 12/16 sample 768/1024, global step 12 (sigterm checkpoint)"
RESIZED = Resumed("ckpt-00000012", "epoch 1 step 12/16 sample 768/1024", 12, CheckpointReason.SIGTERM, Resized(3, 2, 768, 512))
RESIZED_TEXT = RESUMED_TEXT + ", world of 3 (was 2): global batch 768 (was 512), the schedule goes on in samples"
COMPILED = Compiled(1.2649, 3, 4, "/out/run/compile-cache")
COMPILED_TEXT = "[COMPILE] first step 1.26s: 3 of 4 graphs loaded from the compile cache in /out/run/compile-cache"
KINDS = [(TRAIN, TRAIN_TEXT), (EPOCH, EPOCH_TEXT), (DONE, DONE_TEXT), (SAVED, SAVED_TEXT), (RESUMED, RESUMED_TEXT),
         (RESIZED, RESIZED_TEXT), (COMPILED, COMPILED_TEXT)]  # fmt: skip
NO_ROOM = ("rank 0: OSError: [Errno 28] No space left on device", "/out/run/checkpoints had 1.0 MiB free of 100.0 MiB")


@pytest.mark.parametrize("record, text", KINDS, ids=lambda value: type(value).__name__)
def test_each_kind_writes_the_text_the_trainer_always_printed(record, text):
    assert record.text() == text


@pytest.mark.parametrize("record, text", KINDS, ids=lambda value: type(value).__name__)
def test_each_kind_reads_back_into_the_record_that_wrote_it(record, text):
    assert type(record).parse(text) == record
    assert type(record).parse(record.text()).text() == text
    assert type(record).parse("[OTHER] " + text) is None


def test_the_lines_people_read_only_are_written_as_before():
    assert NoCheckpoint("/out/run/checkpoints").text() == "[CKPT] no checkpoint in /out/run/checkpoints: starting from scratch"
    assert CheckpointNotSaved("ckpt-00000008", CheckpointReason.PERIODIC, 1, *NO_ROOM, "ckpt-00000004").text() == (
        "[CKPT] could not save ckpt-00000008 (periodic): rank 0: OSError: [Errno 28] No space left on device; "
        "/out/run/checkpoints had 1.0 MiB free of 100.0 MiB; the newest checkpoint is still ckpt-00000004; "
        "training goes on and the next checkpoint tries again")  # fmt: skip
    assert CheckpointNotSaved("ckpt-00000008", CheckpointReason.PERIODIC, 2, *NO_ROOM, None).text() == (
        "[CKPT] could not save ckpt-00000008 (periodic) (2 in a row): rank 0: OSError: [Errno 28] No space left on "
        "device; /out/run/checkpoints had 1.0 MiB free of 100.0 MiB; the newest checkpoint is still none; "
        "training goes on and the next checkpoint tries again")  # fmt: skip


@pytest.mark.parametrize("fraction", [0.0, 0.0005, 0.00149, 0.41523, 0.4155, 0.5, 0.99999, 1.234])
def test_percentages_print_as_the_old_percent_format_did(fraction):
    """The loop hands over percents (fraction * 100), which print as `{fraction:.1%}` and `{fraction:.0%}` did."""
    line = TrainLine(1, 1, 1, 1, 1, 1, 1.0, 1.0, "samples", 1.0, 1.0, 1.0, fraction * 100, (Straggler(0, "p", fraction * 100),))
    assert line.text().endswith(f" mfu={fraction:.1%} straggler=rank0@p(+{fraction:.0%})")


def test_a_train_line_without_a_known_peak_says_so_and_tracks_no_mfu():
    line = TrainLine(1, 2, 3, 16, 3, 96, 1.3862, 3e-3, "tokens", 1234, 617, 12.5, None)
    assert line.text().endswith(" step_ms=12.5 mfu=n/a")
    assert TrainLine.parse(line.text()) == line
    assert "mfu_pct" not in line.figures()


def test_the_trackers_get_a_train_line_s_figures_as_it_prints_them():
    """The names and values the trackers have always recorded, once read back from the printed line."""
    assert TRAIN.figures() == {"samples": 96.0, "loss": 1.3863, "lr": 3e-3, "samples_per_s": 1235.0, "per_process": 617.0,
                               "step_ms": 12.3, "mfu_pct": 41.5}  # fmt: skip
    logged = []

    class Sink:
        def log(self, step: int, figures: dict[str, float]) -> None:
            logged.append((step, figures))

    Trackers([Sink()]).log_train(TRAIN.global_step, TRAIN.figures())
    assert logged == [(3, {f"train/{name}": value for name, value in TRAIN.figures().items()})]


def test_the_reader_s_derived_figures():
    assert (TRAIN.steps_left, SAVED.step, EPOCH.summary()) == (29, 32, EPOCH_TEXT.removeprefix("[EPOCH] "))
    assert DONE.result() == {"epochs": 2, "train_loss": 0.7459167316555977, "val_loss": VAL_LOSS, "val_ppl": math.exp(VAL_LOSS),
                             "best": "epoch-2", "run": "a", "steps": 32, "params_sum": -0.9125986515118711, "seconds": 3.605}  # fmt: skip
    assert DONE.fields()["params_sum"] == "-0.9125986515118711", "printed in full, to the last bit"


def test_checkpoint_reasons_are_the_words_their_lines_and_records_have_always_said():
    assert [str(reason) for reason in CheckpointReason] == ["periodic", "time", "epoch end", "sigterm"]
