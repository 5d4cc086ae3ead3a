"""The scripts a lent GPU runs, run on the CPU first so that the card's minutes are not spent on their
bugs: bench/profile_step.py, which prices each part of the trainer's step (named for torch.profiler by
trainer/profiling.py) against a reference loop's, and bench/bench_gpu_checkpoint.py, which times the
steps that run while an async checkpoint is written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from trainer_testing import PYTHON, REPO, clean_env

from trainer import profiling
from trainer.stop import StopRequest

sys.path.insert(0, str(REPO / "bench"))
from bench_gpu import SMALL, Case, loss_outside_the_graph, reference_cases, report_rows, trainer_case, warm_up  # noqa: E402
from profile_step import step_profile  # noqa: E402


def test_a_part_is_named_in_a_profile_and_is_an_empty_context_without_one():
    with profiling.part(profiling.FORWARD) as unprofiled:
        pass
    assert unprofiled is None, "no record_function while nothing records"
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with profiling.part(profiling.FORWARD):
            torch.ones(4).sum()
    assert [e.name for e in prof.events() if e.name == profiling.FORWARD] == [profiling.FORWARD]


def _span(name, ts, dur, cat="user_annotation", **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": args}


def test_kernels_are_priced_in_the_part_that_launched_them_from_any_thread():
    events = [
        _span(profiling.FORWARD, 0, 100),
        _span(profiling.BACKWARD, 100, 50),
        _span("cudaLaunchKernel", 10, 2, cat="cuda_runtime", correlation=1),
        _span("cuLaunchKernelEx", 20, 2, cat="cuda_driver", correlation=2),
        _span("cudaLaunchKernel", 120, 2, cat="cuda_runtime", correlation=3),  # autograd's thread, in the backward's span
        _span("cudaMemcpyAsync", 160, 2, cat="cuda_runtime", correlation=4),  # after every part
        _span("sm90_xmma_gemm_bf16bf16_bf16f32", 30, 40, cat="kernel", correlation=1),
        _span("triton_per_fused_cross_entropy_0", 60, 30, cat="kernel", correlation=2),  # overlaps the gemm by 10
        _span("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 130, 40, cat="kernel", correlation=3),
        _span("Memcpy DtoH (Device -> Pinned)", 180, 10, cat="gpu_memcpy", correlation=4),
        _span("gpu annotation mirrored", 30, 60, cat="gpu_user_annotation"),  # not a kernel, not a part
    ]
    profile_ = step_profile(events, steps=2)
    assert profile_["parts"][profiling.FORWARD] == {"host_ms": 0.05, "device_ms": 0.035, "calls": 1}
    assert profile_["parts"][profiling.BACKWARD] == {"host_ms": 0.025, "device_ms": 0.02, "calls": 1}
    assert profile_["device_outside_parts_ms"] == 0.005
    assert profile_["kernel_classes_ms"] == {"matmul": 0.02, "NCCL": 0.02, "compiled (Triton)": 0.015, "copy and fill": 0.005}
    assert profile_["device_busy_ms"] == 0.055, "the overlap of two kernels counts once"
    assert profile_["kernels_per_step"] == 2.0


@pytest.mark.timeout(180)
def test_profile_step_prices_every_part_of_both_loops_on_the_cpu(tmp_path):
    out = tmp_path / "profile.json"
    command = [PYTHON, "bench/profile_step.py", "--device", "cpu", "--steps", "4", "--warmup", "2", "--json", str(out)]
    done = subprocess.run(command, cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    profiled = json.loads(out.read_text())
    assert profiled["env"]["compiled"] is False and profiled["env"]["trainer_compiled"] is False, "as asked: uncompiled on the CPU"
    trainer, reference = profiled["cases"].values()
    every_step = [profiling.DATA, profiling.TO_DEVICE, profiling.FORWARD, profiling.BACKWARD, profiling.LOSS_SUM,
                  profiling.CLIP, profiling.OPTIMIZER, profiling.ZERO_GRAD, profiling.HANG_WATCH]  # fmt: skip
    assert {name: trainer["parts"][name]["calls"] for name in every_step} == dict.fromkeys(every_step, 4)
    assert trainer["parts"][profiling.FIGURES]["calls"] == 1, "one sync: the epoch's last step"
    assert set(reference["parts"]) == {profiling.DATA, profiling.FORWARD, profiling.BACKWARD, profiling.CLIP,
                                       profiling.OPTIMIZER, profiling.ZERO_GRAD}  # fmt: skip
    for case in (trainer, reference):
        assert case["parts"][profiling.BACKWARD]["host_ms"] > 0 and case["wall_ms"] > 0
        assert sum(part["host_ms"] for part in case["parts"].values()) <= case["wall_ms"], "the parts lie within the steps"
        assert case["kernels_per_step"] == 0, "the CPU launches no kernels"
    assert "| forward and loss |" in done.stdout and "| the step: wall, device busy |" in done.stdout


@pytest.mark.timeout(180)
def test_bench_gpu_checkpoint_times_the_steps_that_run_while_each_save_is_written_on_the_cpu(tmp_path):
    out = tmp_path / "checkpoint.json"
    command = [PYTHON, "bench/bench_gpu_checkpoint.py", "--device", "cpu", "--warmup", "2", "--steps", "3",
               "--repeats", "2", "--json", str(out)]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    measured = json.loads(out.read_text())
    assert done.stdout.count("[CKPT] saved ckpt-") == 2, "each save was written and committed"
    assert measured["steps_during_saves"] > 0 and measured["step_during_save_ms"] > 0 and measured["step_ms"] > 0
    assert len(measured["blocked_ms"]) == len(measured["written_s"]) == 2
    assert all(blocked / 1e3 < written for blocked, written in zip(measured["blocked_ms"], measured["written_s"]))
    assert "step while writing / step (goal <= 1.10)" in done.stdout


def test_bench_gpus_ablation_compiles_the_model_without_its_loss(world_of_one, compiled_graphs, tmp_path):
    """The row that prices compiling the loss with the model (bench_gpu.py --ablate) compiles the model
    alone, inside DDP, as the trainer's step did before: its graphs hold no cross-entropy."""
    case, trainer, _ = trainer_case("outside", 512, 4, world_of_one, StopRequest(), tmp_path, ["--no-compile"], SMALL)
    loss_outside_the_graph(trainer)
    for _ in range(2):
        case.step()
    assert compiled_graphs and any("linear" in functions for functions in compiled_graphs), compiled_graphs
    assert not any("cross_entropy" in functions for functions in compiled_graphs), compiled_graphs


def test_bench_gpus_reference_in_ddp_trains_through_the_wrapper_it_compiles(world_of_one, compiled_graphs):
    """The row that prices DDP for the reference loop (bench_gpu.py --ablate) compiles the DDP-wrapped
    module, whose forward holds the loss, and trains: its loss falls on its repeating batches."""
    from torch.nn.parallel import DistributedDataParallel

    (compiled, _), (model, _, fast, eager) = reference_cases(512, 4, shape=SMALL, device=world_of_one.device, ddp=True)
    assert compiled.name == "reference + DDP (compile)" and isinstance(eager, DistributedDataParallel)
    losses = []
    for _ in range(16):
        compiled.step()
        losses.append(compiled.finish())
    assert any("cross_entropy" in functions for functions in compiled_graphs), compiled_graphs
    assert losses[-1] < losses[0], losses


def test_bench_gpus_compile_mode_row_trains_through_the_flag_and_a_case_that_fails_costs_only_its_row(world_of_one, tmp_path):
    """A lever that this card or torch cannot run (bench_gpu.py --compile-modes) is reported by name,
    and the other cases go on to be timed."""
    tuned, trainer, _ = trainer_case("lite", 512, 4, world_of_one, StopRequest(), tmp_path, ["--compile-mode", "lite"], SMALL)
    assert trainer.step.compiled.get_compiler_config()["use_post_grad_passes"] is False, "the lite mode, as torch reports it"

    def fails():
        raise RuntimeError("CUDA graphs: not on this card\nmore")

    broken = Case("broken", fails, 4 * SMALL["seq_len"], tuned.model)
    cases = [broken, tuned]
    failed = warm_up(cases, 2, lambda: None)
    assert cases == [tuned] and tuned.first_step_s > 0
    assert failed == {"broken": "RuntimeError: CUDA graphs: not on this card\nmore"}
    assert ("broken: failed", "RuntimeError: CUDA graphs: not on this card") in report_rows({"rows": [], "failed": failed})


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the script measures, for minutes")
def test_gpu_checks_gives_bench_gpu_flags_it_takes(tmp_path):
    """bench/gpu_checks.sh's bench_gpu steps, on a machine without a GPU: each parses its flags and
    says it has nothing to measure, so a wrong flag is found here and not on a lent card."""
    steps = ("bench-gpu", "batch-32", "compile-modes")
    done = subprocess.run(["bash", "bench/gpu_checks.sh", str(tmp_path), *steps], env=clean_env(PYTHON=PYTHON), cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for step in steps:
        assert f"=== {step}: exit 0" in done.stdout, done.stdout
        assert (tmp_path / f"{step}.log").read_text().strip() == "bench_gpu: no CUDA device here; nothing to measure"
