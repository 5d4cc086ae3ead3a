"""The real job: a causal language model trained on text from the data volume.

By default a small GPT with a byte tokenizer (nothing to download). With --model-local-dir (or
--model-id), a Hugging Face causal LM (see trainer/tasks/lm/hugging_face.py: offline unless --allow-download).
The text is tokenized once into memory-mapped shards that every rank reads (trainer/tasks/lm/corpus.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

from trainer import flops
from trainer.tasks.lm import hugging_face
from trainer.tasks.lm import corpus
from trainer.tasks.lm.model import GPT, GPTConfig
from trainer.tasks.lm.data import TokenBlocks
from trainer.tasks.task import Task, save_state_dict

VOCAB_MULTIPLE = 64  # the GPT's embedding and head rows: a shape the GPU's matmul kernels run at full speed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    corpus.add_arguments(parser)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--dropout", type=float, default=0.0)


def make_task(args: argparse.Namespace) -> Task:
    tokenizer = corpus.tokenizer_of(args)
    train_set, val_set = (TokenBlocks(shard, args.seq_len) for shard, _ in corpus.prepare_shards(args, tokenizer))
    model_source = hugging_face.model_of(args)
    if model_source is not None:
        return _hugging_face_task(args, model_source, tokenizer.tokenizer, train_set, val_set)
    cfg = GPTConfig(tokenizer.vocab_size, args.seq_len, args.n_layer, args.n_head, args.d_model, args.dropout, VOCAB_MULTIPLE)
    # the card names the tokenizer: a model's token ids mean nothing without it
    card = {"tokenizer": tokenizer.identity}
    model = GPT(cfg)
    return Task(model, train_set, val_set, _next_token_loss, "tokens", save_state_dict, card, model.flops_per_token())


def _next_token_loss(model, blocks):
    inputs, targets = blocks[:, :-1], blocks[:, 1:]
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)), targets.numel()


def _hugging_face_task(args: argparse.Namespace, source, tokenizer, train_set, val_set) -> Task:
    transformers = hugging_face.import_transformers(source.flag)
    # fp32 weights whatever the directory holds (often bf16): the optimizer updates them, autocast does the rest
    model = hugging_face.load(source, transformers.AutoModelForCausalLM, args.allow_download, dtype=torch.float32)

    def loss(model, blocks):
        logits = model(input_ids=blocks[:, :-1], use_cache=False).logits  # no cache: nothing generates
        targets = blocks[:, 1:]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1)), targets.numel()

    def save(model, directory: Path) -> None:
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)

    return Task(model, train_set, val_set, loss, "tokens", save, flops_per_unit=_hugging_face_flops(model, args.seq_len))


def _hugging_face_flops(model, seq_len: int) -> float | None:
    """The transformer estimate from the config's names most causal LMs share; None for one without them.
    Counts every parameter (a learned position table too: a slight overestimate)."""
    layers, width = (getattr(model.config, name, None) for name in ("num_hidden_layers", "hidden_size"))
    if layers is None or width is None:
        return None
    params = sum(p.numel() for p in model.parameters())
    return flops.transformer_flops_per_token(params, layers, width, seq_len)
