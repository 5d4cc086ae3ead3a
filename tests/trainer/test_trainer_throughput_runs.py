"""The throughput path in real training processes on the CPU: bf16 gradient compression over gloo in a
world of two, torch.compile, and the [TRAIN] line's figures."""

from __future__ import annotations

import pytest
from toolchain.apiserver import free_port
from trainer_testing import (PYTHON, clean_env, done_lines, entrypoint_command, image_env, kill_tree, pod_env, resumed_lines, run_to_end, same_result,
                             train_lines, uninterrupted_result)

from trainer import lines
from trainer.lines import Compiled
from trainer.outputs import COMPILE_CACHE

SMALL = ["-m", "trainer.train", "smoke", "--epochs", "1", "--samples", "1024", "--batch", "64", "--features", "16",
         "--hidden", "32", "--classes", "3", "--lr", "1e-2", "--seed", "3", "--log-every", "4", "--pg-timeout", "60"]  # fmt: skip


@pytest.mark.timeout(300)
def test_bf16_gradient_compression_trains_a_world_of_two_on_gloo(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "bf16").mkdir()
    plain = uninterrupted_result(SMALL, tmp_path / "plain")
    compressed = uninterrupted_result([*SMALL, "--grad-compression", "bf16"], tmp_path / "bf16")  # ranks end identical
    assert compressed["steps"] == plain["steps"] == "8"
    assert compressed["params_sum"] != plain["params_sum"], "the gradients went through bf16"
    assert float(compressed["val_loss"]) == pytest.approx(float(plain["val_loss"]), rel=0.05)


@pytest.mark.timeout(240)
def test_train_lines_carry_step_time_and_say_mfu_is_unknown_on_the_cpu(tmp_path):
    command = [PYTHON, *SMALL, "--out-dir", str(tmp_path), "--run-name", "lines", "--device", "cpu"]
    code, text = run_to_end(command, clean_env(), tmp_path / "lines.log", timeout=120)
    assert code == 0, text[-4000:]
    lines = train_lines(text)
    assert [line["step"] for line in lines] == ["4/16", "8/16", "12/16", "16/16"]
    for line in lines:
        assert float(line["step_ms"]) > 0 and float(line["samples/s"]) > 0
        assert line["mfu"] == "n/a", "the CPU has no peak in the table"
        assert list(line)[-2:] == ["step_ms", "mfu"], "new fields go at the end"


# torch.compile on the CPU generates and builds C++ with gcc: about 40 s for the first graph on the
# 2-core machine (less once a cache is warm), so one small epoch only.
@pytest.mark.timeout(500)
def test_a_compiled_model_ends_near_the_eager_result_and_a_killed_compiled_pod_resumes_exactly_from_the_runs_compile_cache(spawn, tmp_path):
    """The model and its loss compiled (the smoke MLP, an nn.Sequential, compiles too) train to the eager
    result's loss. A compiled pod SIGKILLed after its checkpoint of step 8 fills the run's compile cache;
    a new pod of the same run loads every graph of its step from it instead of compiling, resumes, and
    ends with the uninterrupted compiled run's exact result."""
    checkpointed = [*SMALL, "--device", "cpu", "--checkpoint-every", "4", "--out-dir", str(tmp_path)]
    results = {}
    for mode in ("--no-compile", "--compile"):
        command = [PYTHON, *checkpointed, "--run-name", mode[2:], mode]
        code, text = run_to_end(command, clean_env(), tmp_path / f"{mode[2:]}.log", timeout=360)
        assert code == 0, text[-4000:]
        (results[mode],) = done_lines(text)
    assert not compiled_lines((tmp_path / "no-compile.log").read_text()), "nothing compiled, nothing said"
    assert not (tmp_path / "no-compile" / COMPILE_CACHE).exists(), "no cache where nothing compiles"
    (cold,) = compiled_lines(text)
    assert cold.loaded == 0 < cold.graphs and cold.cache == str(tmp_path / "compile" / COMPILE_CACHE), cold
    eager, compiled = same_result(results["--no-compile"]), same_result(results["--compile"])
    assert compiled["steps"] == eager["steps"]
    assert float(compiled["val_loss"]) == pytest.approx(float(eager["val_loss"]), rel=1e-3)

    command = entrypoint_command([*checkpointed, "--run-name", "killed", "--compile"])
    # each pod with the image's env, as the image runs it
    first = spawn(command, clean_env(**image_env(tmp_path / "tmp-first"), **pod_env("compiled-0", free_port(), nnodes=1)), "killed-first")
    first.wait_for(lambda text: "saved ckpt-00000008" in text, 360, "the checkpoint of step 8")
    kill_tree(first.pid)
    first.popen.wait(10)
    assert not done_lines(first.text()), "killed before its end"
    (filled,) = compiled_lines(first.text())
    assert filled.loaded == 0 and filled.graphs == cold.graphs and filled.cache == str(tmp_path / "killed" / COMPILE_CACHE), filled
    again = clean_env(**image_env(tmp_path / "tmp-again"), **pod_env("compiled-0", free_port(), nnodes=1))  # a new pod of the run
    code, text = run_to_end(command, again, tmp_path / "killed-again.log", timeout=360)
    assert code == 0, text[-4000:]
    (loaded,) = compiled_lines(text)
    assert loaded.loaded == loaded.graphs == filled.graphs and loaded.cache == filled.cache, loaded
    (line,) = resumed_lines(text)
    assert 8 <= int(line.split("ckpt-")[1][:8]) < 16, line  # mid-epoch: steps are trained again after it
    (resumed,) = done_lines(text)
    assert same_result(resumed) == compiled


def compiled_lines(text: str) -> list[Compiled]:
    return [Compiled.parse(row) for row in lines.tagged(text, Compiled.PREFIX)]
