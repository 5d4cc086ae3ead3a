"""The throughput path's parts, in this process: parameter groups, vocabulary padding, FLOPs and MFU,
and the number of collectives a training epoch runs."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from trainer import compile_cache, flops, optimizer, throughput, train
from trainer.tasks import smoke
from trainer.tasks.lm.model import GPT, GPTConfig
from trainer.loop import Trainer
from trainer.outputs import RunDir
from trainer.step import StepWindow
from trainer.stop import StopRequest
from trainer.tasks.checks import check_task

TINY = GPTConfig(vocab_size=257, seq_len=16, n_layer=2, n_head=2, d_model=32, vocab_multiple=64)


def names_of(model: torch.nn.Module, params) -> set[str]:
    ids = {id(p) for p in params}
    return {name for name, p in model.named_parameters() if id(p) in ids}


def test_decay_falls_on_2d_weights_only_never_on_biases_norms_or_embeddings():
    model = GPT(TINY)
    decay, no_decay = optimizer.parameter_groups(model, weight_decay=0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    decayed, kept = names_of(model, decay["params"]), names_of(model, no_decay["params"])
    per_block = {"attn.qkv.weight", "attn.proj.weight", "mlp.0.weight", "mlp.2.weight"}
    assert decayed == {f"blocks.{i}.{name}" for i in range(TINY.n_layer) for name in per_block}
    # the head shares the token embedding's tensor: an embedding, so no decay, and listed once
    assert {"tokens.weight", "positions.weight", "ln_f.weight", "ln_f.bias", "blocks.0.attn.qkv.bias"} <= kept
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    assert not decayed & kept


def test_adamw_is_fused_on_cuda_and_the_cpu_and_takes_the_betas_given():
    assert optimizer.adamw_options(torch.device("cuda", 0)) == optimizer.adamw_options(torch.device("cpu")) == {"fused": True}
    assert optimizer.adamw_options(torch.device("meta")) == {}
    made = optimizer.make_adamw(GPT(TINY), lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), device=torch.device("cpu"))
    assert [g["weight_decay"] for g in made.param_groups] == [0.1, 0.0]
    assert all(g["betas"] == (0.9, 0.95) and g["fused"] for g in made.param_groups)


def test_the_fused_cpu_update_is_the_same_on_one_thread_and_on_two():
    """A pod's processes train on as many threads as its CPU: the update must not depend on it."""
    def trained(threads: int) -> torch.Tensor:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
        adamw = optimizer.make_adamw(model, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.999), device=torch.device("cpu"))
        data = torch.Generator().manual_seed(1)
        for _ in range(4):
            model(torch.randn(32, 64, generator=data)).square().mean().backward()
            with torch_threads(threads):
                adamw.step()
            adamw.zero_grad()
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    assert torch.equal(trained(1), trained(2))


@contextmanager
def torch_threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def test_the_lm_task_takes_the_usual_lm_betas_and_the_smoke_task_keeps_torchs():
    assert train.config_of(train.parse_args(["lm"])).betas == (0.9, 0.95)
    assert train.config_of(train.parse_args(["smoke"])).betas == (0.9, 0.999)
    assert train.config_of(train.parse_args(["smoke", "--adam-betas", "0.8", "0.9"])).betas == (0.8, 0.9)


def test_the_vocabulary_is_padded_to_a_multiple_of_64_and_the_padding_never_predicted():
    model = GPT(TINY)
    assert model.tokens.weight.shape[0] == 320 and model.head.weight.shape[0] == 320
    ids = torch.randint(257, (3, TINY.seq_len), generator=torch.Generator().manual_seed(0))
    logits = model(ids)
    assert logits.shape[-1] == 257, "only real ids get logits, so no target or sample can be a padding id"

    unpadded = GPT(GPTConfig(257, TINY.seq_len, TINY.n_layer, TINY.n_head, TINY.d_model))
    state = model.state_dict()
    state["tokens.weight"] = state["tokens.weight"][:257]
    state["head.weight"] = state["head.weight"][:257]
    unpadded.load_state_dict(state)
    targets = torch.randint(257, (3, TINY.seq_len), generator=torch.Generator().manual_seed(1))
    padded_loss = F.cross_entropy(logits.reshape(-1, 257), targets.reshape(-1))
    plain_loss = F.cross_entropy(unpadded(ids).reshape(-1, 257), targets.reshape(-1))
    assert torch.allclose(padded_loss, plain_loss, atol=1e-6)


def test_a_card_written_before_padding_still_builds_its_model():
    old = {"vocab_size": 257, "seq_len": 16, "n_layer": 1, "n_head": 2, "d_model": 32, "dropout": 0.0}
    assert GPT(GPTConfig(**old)).tokens.weight.shape[0] == 257
def test_gpt2_small_flops_per_token_and_mfu_match_the_hand_count():
    gpt2 = GPT(GPTConfig(vocab_size=50257, seq_len=1024, n_layer=12, n_head=12, d_model=768, vocab_multiple=64))
    # N without the position table: 50304 x 768 (tied head) + 12 x (12 x 768^2 + 13 x 768) + 2 x 768 (ln_f)
    n = 50304 * 768 + 12 * (12 * 768**2 + 13 * 768) + 2 * 768
    assert n == 123_689_472
    attention = 12 * 12 * 12 * 64 * 1024  # 12 * L * H * Q * T
    assert gpt2.flops_per_token() == 6 * n + attention == 855_383_040
    # 400k tokens/s on one H100 SXM (989 TFLOP/s bf16): 34.6%
    assert flops.mfu(gpt2.flops_per_token(), 400_000, flops.peak_flops_of("NVIDIA H100 80GB HBM3")) == pytest.approx(0.34596, abs=1e-5)


@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H200", 989e12),
    ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA A10", 125e12), ("NVIDIA L4", 121e12), ("NVIDIA L40S", 362e12),
    ("Tesla T4", 65e12), ("Tesla V100-SXM2-16GB", 125e12), ("NVIDIA GeForce RTX 4090", None),
])  # fmt: skip
def test_peak_flops_by_gpu_name(name, peak):
    assert flops.peak_flops_of(name) == peak


def test_no_mfu_without_a_peak_or_a_flop_count():
    assert flops.peak_flops(torch.device("cpu")) is None
    assert flops.mfu(1e9, 1e3, None) is None and flops.mfu(None, 1e3, 1e12) is None


def test_compile_is_on_for_cuda_by_default_and_either_way_on_request():
    assert train.config_of(train.parse_args(["smoke"])).compile is None  # the trainer: on CUDA only
    assert train.config_of(train.parse_args(["smoke", "--compile"])).compile is True
    assert train.config_of(train.parse_args(["smoke", "--no-compile"])).compile is False


def test_the_compile_modes_offered_are_torchs_own():
    assert list(throughput.COMPILE_MODES) == list(torch._inductor.list_mode_options())


def test_a_compile_mode_compiles_the_step_in_that_mode_on_the_cpu_too(world_of_one, tmp_path):
    tuned = smoke_trainer(world_of_one, tmp_path / "tuned", log_every=4, extra=["--compile-mode", "max-autotune-no-cudagraphs"])
    plain = smoke_trainer(world_of_one, tmp_path / "plain", log_every=4, extra=["--compile"])
    assert tuned.cfg.compile and tuned.step.compiled is not tuned.step.ddp, "a mode compiles the step"
    # what torch.compile was given, as it reports it
    assert tuned.step.compiled.get_compiler_config()["max_autotune"] is True
    assert plain.step.compiled.get_compiler_config()["max_autotune"] is False
    assert train.config_of(train.parse_args(["smoke"])).compile_mode == "default"


def test_the_compile_cache_goes_to_the_run_unless_the_user_named_one(tmp_path, monkeypatch):
    from torch._inductor.runtime.cache_dir_utils import cache_dir, default_cache_dir

    run = tmp_path / "run" / "compile-cache"
    monkeypatch.delenv(compile_cache.CACHE_DIR_ENV, raising=False)
    assert compile_cache.keep_in(run) == run and Path(cache_dir()) == run, "where torch then puts it"
    monkeypatch.setenv(compile_cache.CACHE_DIR_ENV, default_cache_dir())  # as importing torch._dynamo leaves it
    assert compile_cache.keep_in(run) == run and Path(cache_dir()) == run
    own = tmp_path / "own"
    monkeypatch.setenv(compile_cache.CACHE_DIR_ENV, str(own))
    assert compile_cache.keep_in(run) == own and Path(cache_dir()) == own


@pytest.mark.parametrize("flags, words", [
    (["--compile-mode", "fastest"], ("--compile-mode", "fastest", *throughput.COMPILE_MODES)),
    (["--no-compile", "--compile-mode", "max-autotune"], ("--compile-mode", "max-autotune", "--no-compile")),
])  # fmt: skip
def test_an_unknown_compile_mode_or_one_with_no_compile_is_refused_naming_both(capsys, flags, words):
    with pytest.raises(SystemExit):
        train.parse_args(["smoke", *flags])
    error = capsys.readouterr().err.splitlines()[-1]
    assert all(word in error for word in words), error


def test_grad_compression_takes_none_or_bf16(capsys):
    assert train.config_of(train.parse_args(["smoke"])).grad_compression == "none"
    assert train.config_of(train.parse_args(["smoke", "--grad-compression", "bf16"])).grad_compression == "bf16"
    with pytest.raises(SystemExit):
        train.parse_args(["smoke", "--grad-compression", "fp8"])
    error = capsys.readouterr().err.splitlines()[-1]
    assert all(word in error for word in ("--grad-compression", "fp8", "none", "bf16")), error


def smoke_trainer(d, tmp_path, log_every: int, extra=()) -> Trainer:
    args = train.parse_args(["smoke", "--samples", "512", "--batch", "32", "--features", "8", "--hidden", "16",
                             "--checkpoint-every", "0", "--log-every", str(log_every), "--device", "cpu", *extra])  # fmt: skip
    torch.manual_seed(args.seed)
    return Trainer(smoke.make_task(args), d, train.config_of(args), RunDir(tmp_path / "run"), StopRequest(), "run")


def test_an_epoch_reads_the_devices_figures_once_per_log_interval(world_of_one, tmp_path, monkeypatch):
    trainer = smoke_trainer(world_of_one, tmp_path, log_every=4)  # 16 steps an epoch
    collectives, reads = [], []
    all_reduce, tolist, item = dist.all_reduce, torch.Tensor.tolist, torch.Tensor.item

    def read_by_the_trainer(tensor, read):
        caller = sys._getframe(2).f_code.co_filename  # torch's own reads (AdamW's step count) are host values
        if f"{os.sep}trainer{os.sep}" in caller:
            reads.append(Path(caller).name)
        return read(tensor)

    monkeypatch.setattr(dist, "all_reduce", lambda *a, **k: collectives.append(1) or all_reduce(*a, **k))
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: read_by_the_trainer(t, tolist))
    monkeypatch.setattr(torch.Tensor, "item", lambda t: read_by_the_trainer(t, item))
    trainer._train_epoch()
    assert trainer.progress.step_in_epoch == 16
    assert len(collectives) == 4, "one all-reduce per 4 steps beyond DDP's own"
    # one read per sync, and the sampler's list of the epoch's sample indices
    assert sorted(reads) == ["distributed.py"] * 4 + ["sampler.py"], reads


def test_the_compiled_step_traces_the_model_and_its_checked_loss_as_one_forward_compiled_once(world_of_one, compiled_graphs, tmp_path):
    """The loss's kernels fuse with the model's only where torch.compile sees both (ModelWithLoss); the
    contract's check of the loss's result, traced with it, must leave nothing that compiles it again."""
    traced = compiled_graphs
    args = train.parse_args(["smoke", "--samples", "512", "--batch", "32", "--features", "8", "--hidden", "16",
                             "--checkpoint-every", "0", "--device", "cpu", "--compile"])  # fmt: skip
    torch.manual_seed(args.seed)
    task = check_task(smoke.make_task(args), "smoke", world_of_one)
    trainer = Trainer(task, world_of_one, train.config_of(args), RunDir(tmp_path / "run"), StopRequest(), "run")
    batches, window = iter(trainer.loader), StepWindow(world_of_one.device)
    trainer.step(batches, window)
    compiled_at_the_first_step = len(traced)
    for _ in range(3):
        trainer.step(batches, window)
    assert compiled_at_the_first_step > 0, "the step is compiled"
    assert any("cross_entropy" in functions and "linear" in functions for functions in traced), traced
    assert len(traced) == compiled_at_the_first_step, "nothing was compiled again after the first step"
    assert window.steps == 4 and window.units == 4 * 32
