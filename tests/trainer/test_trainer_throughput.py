"""The throughput path's parts, in this process: parameter groups, vocabulary padding, FLOPs and MFU,
and the number of collectives a training epoch runs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trainer import optimizer, train
from trainer.gpt import GPT, GPTConfig

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


def test_adamw_is_fused_on_cuda_only_and_takes_the_betas_given():
    assert optimizer.adamw_options(torch.device("cuda", 0)) == {"fused": True}
    assert optimizer.adamw_options(torch.device("cpu")) == {}
    made = optimizer.make_adamw(GPT(TINY), lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), device=torch.device("cpu"))
    assert [g["weight_decay"] for g in made.param_groups] == [0.1, 0.0]
    assert all(g["betas"] == (0.9, 0.95) for g in made.param_groups)


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
