"""Mixed precision: bf16 only on GPUs that have it natively, and checkpoints that resume across precisions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from trainer_testing import PYTHON, clean_env, done_lines, run_to_end

from trainer.checkpoint.store import CheckpointStore
from trainer.step import amp_dtype


def pretend_gpu(monkeypatch, major: int, bf16_emulated: bool) -> None:
    """A CUDA device of compute capability `major`, behind torch's own is_bf16_supported."""
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(major=major))
    monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda device: bf16_emulated)


@pytest.mark.parametrize("major", [7, 6])  # T4 and V100 (7.x), P100 (6.0): bf16 only emulated
def test_a_gpu_that_only_emulates_bf16_trains_in_fp16(monkeypatch, major):
    pretend_gpu(monkeypatch, major, bf16_emulated=True)
    assert amp_dtype(torch.device("cuda", 0)) == torch.float16


@pytest.mark.parametrize("major", [8, 9])  # A100, H100
def test_a_gpu_with_native_bf16_trains_in_bf16(monkeypatch, major):
    pretend_gpu(monkeypatch, major, bf16_emulated=True)
    assert amp_dtype(torch.device("cuda", 0)) == torch.bfloat16


def test_the_cpu_trains_in_fp32():
    assert amp_dtype(torch.device("cpu")) is None


# The fp16 branch on the CPU: torch's CPU autocast and GradScaler("cpu") run the same code as on a GPU.
IN_FP16 = "import sys, torch; from trainer import step, train; step.amp_dtype = lambda device: torch.float16; sys.exit(train.main(sys.argv[1:]))"


def scaler_state_of(run) -> dict:
    return CheckpointStore(run / "checkpoints", keep=1).newest_complete().record.scaler


@pytest.mark.timeout(240)
def test_a_checkpoint_without_loss_scaler_state_resumes_in_fp16_and_back(tmp_path):
    run_args = ["smoke", "--samples", "512", "--batch", "64", "--features", "16", "--hidden", "32", "--classes", "4",
                "--device", "cpu", "--out-dir", str(tmp_path), "--run-name", "run"]  # fmt: skip

    def train(name: str, epochs: int, *prefix: str) -> str:
        command = [PYTHON, *prefix, *run_args, "--epochs", str(epochs)]
        code, text = run_to_end(command, clean_env(), tmp_path / f"{name}.log", timeout=120)
        assert code == 0, text[-4000:]
        assert len(done_lines(text)) == 1, text[-4000:]
        return text

    train("fp32", 1, "-m", "trainer.train")
    assert scaler_state_of(tmp_path / "run") == {}, "fp32 and bf16 keep no loss-scaler state"

    text = train("fp16", 2, "-c", IN_FP16)
    assert "[CKPT] resumed from ckpt-00000008:" in text, text[-4000:]
    assert "no loss-scaler state" in text, text[-4000:]
    assert "[EPOCH] 2/2" in text
    assert scaler_state_of(tmp_path / "run")["scale"] > 0, "fp16 saves its loss scale"

    text = train("fp32-again", 3, "-m", "trainer.train")
    assert "[EPOCH] 3/3" in text, text[-4000:]
