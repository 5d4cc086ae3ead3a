"""The trainer itself: determinism, outputs, the LM task, gradient accumulation, resume after the end."""

from __future__ import annotations

import json
import math

import pytest
import torch
from trainer.train import parse_args
from trainer_testing import (
    PYTHON, SMOKE_ARGS, clean_env, done_lines, entrypoint_command, epoch_records, free_port, pod_env, run_to_end, same_result,
    train_lines, write_corpus,
)  # fmt: skip

SMOKE = SMOKE_ARGS[2:]  # the subcommand and its flags, without "-m trainer.train"


def train(tmp_path, name: str, args: list[str]) -> tuple[dict[str, str], str]:
    """A world of one process: `python -m trainer.train ...` with no torchrun."""
    command = [PYTHON, "-m", "trainer.train", *args, "--out-dir", str(tmp_path), "--run-name", name]
    code, text = run_to_end(command, clean_env(), tmp_path / f"{name}.log", timeout=120)
    assert code == 0, text[-4000:]
    (line,) = done_lines(text)
    return line, text


@pytest.mark.timeout(180)
def test_smoke_test_is_identical_for_one_seed_and_writes_its_outputs(tmp_path):
    first, log = train(tmp_path, "a", SMOKE)
    second, _ = train(tmp_path, "b", SMOKE)
    assert same_result(first) == same_result(second)
    other_seed, _ = train(tmp_path, "c", [*SMOKE[:-1], "43"])
    assert other_seed["params_sum"] != first["params_sum"]

    for tag in ("[DDP]", "[TRAIN]", "[EPOCH]", "[DONE]"):
        assert tag in log
    assert all("samples/s" in line for line in train_lines(log))

    run = tmp_path / "a"
    records = epoch_records(run)
    assert [r["epoch"] for r in records] == [1, 2]
    for record in records:
        assert record["val_ppl"] == pytest.approx(math.exp(record["val_loss"]))
        assert json.loads((run / f"epoch-{record['epoch']}" / "metrics.json").read_text()) == record
        weights = torch.load(run / f"epoch-{record['epoch']}" / "model.pt", weights_only=True)
        assert set(weights) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    best = min(records, key=lambda r: r["val_loss"])
    assert (run / "best").resolve() == (run / f"epoch-{best['epoch']}").resolve()
    assert first["best"] == f"epoch-{best['epoch']}"


@pytest.mark.timeout(180)
def test_the_batch_wait_paces_a_tasks_training_and_changes_no_figure(tmp_path):
    with pytest.raises(SystemExit):
        parse_args(["smoke", "--batch-seconds", "-1"])
    paced_seconds = 0.02
    unpaced, _ = train(tmp_path, "unpaced", SMOKE)
    paced, log = train(tmp_path, "paced", [*SMOKE, "--batch-seconds", str(paced_seconds)])
    assert same_result(paced) == same_result(unpaced)
    batch_size = int(SMOKE[SMOKE.index("--batch") + 1])
    # each training batch took at least its wait
    lines = train_lines(log)
    assert lines and all(float(line["samples/s"]) <= batch_size / paced_seconds for line in lines), lines


@pytest.mark.timeout(180)
def test_a_restart_after_the_last_epoch_trains_nothing_and_reports_the_same_result(tmp_path):
    first, _ = train(tmp_path, "done", SMOKE)
    again, log = train(tmp_path, "done", SMOKE)
    assert "[CKPT] resumed from ckpt-00000032:" in log
    assert "[TRAIN]" not in log
    assert same_result(again) == same_result(first)
    assert len(epoch_records(tmp_path / "done")) == 2


@pytest.mark.timeout(180)
def test_gradient_accumulation_equals_one_big_batch(tmp_path):
    whole, _ = train(tmp_path, "whole", [*SMOKE, "--epochs", "1"])
    halves, _ = train(tmp_path, "halves", [*SMOKE, "--epochs", "1", "--batch", "128", "--grad-accum", "2"])
    assert whole["steps"] == halves["steps"] == "16"
    assert float(halves["val_loss"]) == pytest.approx(float(whole["val_loss"]), rel=1e-4)
    # Weight by weight: the sum of all weights (params_sum) nearly cancels, so its relative error is no
    # measure. Adam turns a gradient's last-bit difference near zero into a step-sized one for a few
    # weights (up to 2e-4 of 32768 seen), so each weight may differ by a third of a step, and the mean by little.
    whole_weights, halves_weights = (torch.load(tmp_path / run / "epoch-1" / "model.pt", weights_only=True) for run in ("whole", "halves"))
    assert set(halves_weights) == set(whole_weights)
    for name, weight in whole_weights.items():
        torch.testing.assert_close(halves_weights[name], weight, rtol=1e-3, atol=1e-3, msg=lambda m: f"{name}: {m}")
        assert (halves_weights[name] - weight).abs().mean() < 1e-5, name


@pytest.mark.timeout(240)
def test_language_model_on_jsonl_in_a_world_of_two_with_accumulation(tmp_path):
    write_corpus(tmp_path / "data")
    args = ["-m", "trainer.train", "lm", "--epochs", "2", "--batch", "4", "--grad-accum", "2", "--seq-len", "32",
            "--d-model", "32", "--n-layer", "1", "--n-head", "2", "--lr", "3e-3", "--warmup-steps", "2", "--log-every", "2",
            "--data-dir", str(tmp_path / "data")]  # fmt: skip
    env = clean_env(**pod_env("lm-0", free_port(), nnodes=1, nproc=2, run_name="lm"), OUT_DIR=str(tmp_path / "out"))
    code, text = run_to_end(entrypoint_command(args), env, tmp_path / "lm.log", timeout=200)
    assert code == 0, text[-4000:]
    lines = done_lines(text)
    assert len(lines) == 2 and same_result(lines[0]) == same_result(lines[1]), "replicas diverged"
    assert all("tokens/s" in line for line in train_lines(text))
    records = epoch_records(tmp_path / "out" / "lm")
    assert records[-1]["val_loss"] < records[0]["val_loss"] < math.log(257)  # learns beyond a uniform guess
    assert records[-1]["val_ppl"] == pytest.approx(math.exp(records[-1]["val_loss"]))
    assert (tmp_path / "out" / "lm" / "best").is_symlink()


@pytest.mark.timeout(60)
def test_missing_data_is_reported_with_where_it_was_looked_for(tmp_path):
    command = [PYTHON, "-m", "trainer.train", "lm", "--data-dir", str(tmp_path), "--out-dir", str(tmp_path)]
    code, text = run_to_end(command, clean_env(), tmp_path / "nodata.log", timeout=60)
    assert code != 0
    assert f"{tmp_path}/train.jsonl" in text
