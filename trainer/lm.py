"""The real job: a causal language model trained on JSONL text from the data volume.

By default a small GPT with a byte tokenizer (nothing to download). With --model-local-dir, a
Hugging Face causal LM directory from the models volume, loaded offline (local_files_only). That
needs the transformers package, which the image leaves out by default: to have it, add the
`transformers==` line of requirements-dev.txt (the version the tests run) to trainer/requirements.txt.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from trainer import contract as c
from trainer.gpt import GPT, GPTConfig
from trainer.lm_data import ByteTokenizer, TokenBlocks, read_texts
from trainer.task import Task, save_state_dict


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get(c.DATA_DIR.name) or c.DATA_MOUNT))
    parser.add_argument("--train-file", default="train.jsonl")
    parser.add_argument("--val-file", default="val.jsonl")
    parser.add_argument("--text-field", default="text", help="the JSON key holding each document's text")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--models-dir", type=Path, default=Path(os.environ.get(c.MODELS_DIR.name) or c.MODELS_MOUNT))
    parser.add_argument("--model-local-dir", type=Path, help="a Hugging Face model directory (relative: under --models-dir)")
    parser.add_argument("--tokenizer-local-dir", type=Path, help="defaults to --model-local-dir")


def make_task(args: argparse.Namespace) -> Task:
    if args.model_local_dir is not None:
        return _hugging_face_task(args)
    tokenizer = ByteTokenizer()
    train_set, val_set = _datasets(args, tokenizer.encode, tokenizer.eos_id)
    cfg = GPTConfig(tokenizer.vocab_size, args.seq_len, args.n_layer, args.n_head, args.d_model, args.dropout)
    return Task(GPT(cfg), train_set, val_set, _next_token_loss, "tokens", save_state_dict)


def _datasets(args: argparse.Namespace, encode, eos_id: int) -> tuple[TokenBlocks, TokenBlocks]:
    paths = [args.data_dir / args.train_file, args.data_dir / args.val_file]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"no {' or '.join(missing)}: put JSONL files with a {args.text_field!r} field there")
    return tuple(TokenBlocks(read_texts(p, args.text_field), encode, eos_id, args.seq_len) for p in paths)


def _next_token_loss(model, blocks):
    inputs, targets = blocks[:, :-1], blocks[:, 1:]
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)), targets.numel()


def _hugging_face_task(args: argparse.Namespace) -> Task:
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise SystemExit(
            "--model-local-dir needs the transformers package, which is not installed: "
            "pip install transformers (for the image, see the docstring of trainer/lm.py)"
        ) from exc
    model_dir = args.models_dir / args.model_local_dir  # an absolute --model-local-dir wins the join
    # fp32 weights whatever the directory holds (often bf16): the optimizer updates them, autocast does the rest
    model = _load_local("--model-local-dir", model_dir, AutoModelForCausalLM, dtype=torch.float32)
    tokenizer_flag = "--tokenizer-local-dir" if args.tokenizer_local_dir else "--model-local-dir"
    tokenizer_dir = args.models_dir / (args.tokenizer_local_dir or args.model_local_dir)
    tokenizer = _load_local(tokenizer_flag, tokenizer_dir, AutoTokenizer)
    if tokenizer.eos_token_id is None:
        raise SystemExit(f"the tokenizer in {tokenizer_dir} has no end-of-sequence token to separate documents")
    train_set, val_set = _datasets(args, lambda text: tokenizer(text)["input_ids"], tokenizer.eos_token_id)

    def loss(model, blocks):
        logits = model(input_ids=blocks[:, :-1], use_cache=False).logits  # no cache: nothing generates
        targets = blocks[:, 1:]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1)), targets.numel()

    def save(model, directory: Path) -> None:
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)

    return Task(model, train_set, val_set, loss, "tokens", save)


def _load_local(flag: str, directory: Path, auto_class, **options):
    """`auto_class.from_pretrained` on a local directory only: a bad one is named by its flag, not taken for a hub id."""
    if not directory.is_dir():
        raise SystemExit(f"{flag} {directory}: no such directory (a relative path is taken under --models-dir)")
    try:
        return auto_class.from_pretrained(directory, local_files_only=True, **options)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{flag} {directory}: not a Hugging Face directory that {auto_class.__name__} can load: {exc}") from exc
