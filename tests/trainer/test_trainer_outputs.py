"""The run directory's metrics log across crashes: a resume rewrites it, whatever a crash left."""

from __future__ import annotations

import json
import re

import pytest

from trainer.outputs import RunDir


def test_a_torn_last_metrics_line_does_not_block_the_resume(tmp_path):
    run = RunDir(tmp_path)
    run.append_metrics({"epoch": 1, "val_loss": 1.5})
    run.append_metrics({"epoch": 2, "val_loss": 1.2})
    # A crash in the middle of appending epoch 3's line (append is one write, but the disk may
    # keep a prefix of it).
    with open(run.metrics, "a") as file:
        file.write('{"epoch": 3, "val_lo')

    run.forget_metrics_from(3)  # the resumed run redoes epoch 3

    assert [json.loads(line)["epoch"] for line in run.metrics.read_text().splitlines()] == [1, 2]
    run.append_metrics({"epoch": 3, "val_loss": 1.0})
    assert [json.loads(line)["epoch"] for line in run.metrics.read_text().splitlines()] == [1, 2, 3]


def test_resuming_an_earlier_epoch_drops_the_later_lines(tmp_path):
    run = RunDir(tmp_path)
    for epoch in (1, 2, 3):
        run.append_metrics({"epoch": epoch})
    run.forget_metrics_from(2)
    assert [json.loads(line)["epoch"] for line in run.metrics.read_text().splitlines()] == [1]


def test_a_torn_line_before_the_last_is_an_error_that_names_the_file_and_line(tmp_path):
    # Appends are fsynced one by one, so only the last line can be cut short by a crash: a torn line
    # before it is damage of another kind, which the resume must not quietly drop.
    run = RunDir(tmp_path)
    run.append_metrics({"epoch": 1})
    with open(run.metrics, "a") as file:
        file.write('{"epoch": 2, "val_lo\n')
    run.append_metrics({"epoch": 3})

    with pytest.raises(ValueError, match=re.escape(f"{run.metrics} line 2: not a whole JSON record")):
        run.forget_metrics_from(4)
    assert len(run.metrics.read_text().splitlines()) == 3, "the file is left as it was, for a person to look at"
