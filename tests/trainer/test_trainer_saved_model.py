"""An epoch's model and the best one load on their own, in a fresh process, without the training flags."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
from trainer_testing import PYTHON, clean_env, done_lines, run_to_end, write_corpus

from trainer.lines import tagged
from trainer.tasks.lm.model import GPT, GPTConfig

LM_SHAPE = ["--seq-len", "16", "--d-model", "32", "--n-layer", "1", "--n-head", "2", "--dropout", "0.1"]


def train(tmp_path, name: str, args: list[str]) -> dict[str, str]:
    command = [PYTHON, "-m", "trainer.train", *args, "--out-dir", str(tmp_path), "--run-name", name, "--device", "cpu"]
    code, text = run_to_end(command, clean_env(), tmp_path / f"{name}.log", timeout=120)
    assert code == 0, text[-4000:]
    (line,) = done_lines(text)
    return line


def in_a_fresh_process(tmp_path, name: str, args: list[str]) -> str:
    code, text = run_to_end([PYTHON, *args], clean_env(), tmp_path / f"{name}.log", timeout=60)
    assert code == 0, text[-4000:]
    return text


def load_line(text: str) -> dict[str, str]:
    (line,) = tagged(text, "[LOAD]")
    return dict(field.split("=", 1) for field in line.split()[2:])


@pytest.mark.timeout(240)
def test_a_language_model_loads_with_its_config_and_gives_the_trained_outputs(tmp_path):
    write_corpus(tmp_path / "data")
    done = train(tmp_path, "lm", ["lm", "--epochs", "2", "--batch", "4", "--lr", "3e-3", "--warmup-steps", "2",
                                  "--data-dir", str(tmp_path / "data"), *LM_SHAPE])  # fmt: skip
    run = tmp_path / "lm"
    card = json.loads((run / "epoch-2" / "model.json").read_text())
    assert (card["architecture"], card["task"], card["tokenizer"]) == ("gpt", "lm", "bytes+eos-256")
    assert card["config"] == {"vocab_size": 257, "seq_len": 16, "n_layer": 1, "n_head": 2, "d_model": 32, "dropout": 0.1,
                              "vocab_multiple": 64}  # fmt: skip

    # The command, no flags: what it loaded is the model the run ended with.
    text = in_a_fresh_process(tmp_path, "load-cli", ["-m", "trainer.load", str(run / "epoch-2")])
    assert load_line(text)["params_sum"] == done["params_sum"], text

    # The function, in a fresh process: its outputs on a fixed input are those of the trained weights
    # in a model built from the training flags.
    script = textwrap.dedent("""
        import sys, torch
        from trainer.load import load_model
        model = load_model(sys.argv[1])
        assert not model.training, "loaded for use, not for training: dropout off"
        torch.save(model(torch.arange(32).reshape(2, 16) * 7 % 257), sys.argv[2])
    """)
    for directory in ("epoch-2", "best"):
        outputs = tmp_path / f"outputs-{directory}.pt"
        in_a_fresh_process(tmp_path, f"load-{directory}", ["-c", script, str(run / directory), str(outputs)])
        trained = GPT(GPTConfig(vocab_size=257, seq_len=16, n_layer=1, n_head=2, d_model=32, dropout=0.1, vocab_multiple=64))
        trained.load_state_dict(torch.load(run / directory / "model.pt", weights_only=True))
        expected = trained.eval()(torch.arange(32).reshape(2, 16) * 7 % 257)
        assert torch.equal(torch.load(outputs, weights_only=True), expected.detach())


@pytest.mark.timeout(120)
def test_the_smoke_model_loads_with_its_config(tmp_path):
    done = train(tmp_path, "smoke", ["smoke", "--epochs", "1", "--samples", "512", "--features", "16", "--hidden", "8",
                                     "--classes", "3", "--batch", "64"])  # fmt: skip
    card = json.loads((tmp_path / "smoke" / "epoch-1" / "model.json").read_text())
    assert card == {"architecture": "mlp", "task": "smoke", "config": {"features": 16, "hidden": 8, "classes": 3}}
    text = in_a_fresh_process(tmp_path, "load", ["-m", "trainer.load", str(tmp_path / "smoke" / "best")])
    assert load_line(text)["params_sum"] == done["params_sum"], text


@pytest.mark.timeout(60)
def test_a_directory_without_a_card_is_refused_with_what_it_lacks(tmp_path):
    (tmp_path / "model.pt").write_bytes(b"")
    code, text = run_to_end([PYTHON, "-m", "trainer.load", str(tmp_path)], clean_env(), tmp_path / "refused.log", timeout=60)
    assert code == 1, text
    assert f"{tmp_path / 'model.json'}: no model card" in text and "Traceback" not in text, text
