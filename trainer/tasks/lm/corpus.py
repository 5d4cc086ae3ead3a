"""The lm task's corpus: its flags, its tokenizer, and its token shards, prepared once and shared.

Used by training and by `python -m trainer.prepare`, which take the same flags and so find the same
shards; nothing here imports torch, so preparing costs the tokenizer's memory and a batch, not a trainer's.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from trainer import console
from trainer import contract as c
from trainer.tasks.lm import hugging_face
from trainer.tasks.lm.documents import DocumentSource
from trainer.tasks.lm.tokenizer import ByteTokenizer, HuggingFaceTokenizer
from trainer.tasks.lm.shards import CACHE_FLAG, WAIT_FLAG, Shard, prepare_tokens

CACHE_DIR_NAME = ".token-cache"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=c.claim_dir(c.DATA_DIR, c.DATA_MOUNT))
    parser.add_argument("--train-file", default="train.jsonl",
                        help="under --data-dir: .jsonl, .txt (blank-line separated documents) or a save_to_disk dataset directory")  # fmt: skip
    parser.add_argument("--val-file", default="val.jsonl", help="as --train-file")
    parser.add_argument("--text-field", default="text", help="the JSON key (or dataset column) holding each document's text")
    parser.add_argument(CACHE_FLAG, type=Path, help=f"where token shards are kept (default: <--data-dir>/{CACHE_DIR_NAME})")
    parser.add_argument(WAIT_FLAG, type=float, default=7200,
                        help="seconds to wait for another process preparing the same shard")  # fmt: skip
    hugging_face.add_arguments(parser)


def tokenizer_of(args: argparse.Namespace):
    """The tokenizer the flags name (--tokenizer-local-dir, else the model's), or the byte tokenizer."""
    tokenizer = hugging_face.load_tokenizer(args)
    return ByteTokenizer() if tokenizer is None else HuggingFaceTokenizer(tokenizer)


def cache_dir_of(args: argparse.Namespace) -> Path:
    return args.token_cache_dir if args.token_cache_dir is not None else args.data_dir / CACHE_DIR_NAME


def prepare_shards(args: argparse.Namespace, tokenizer) -> list[tuple[Shard, bool]]:
    """The train and validation shards, (shard, whether this process tokenized it) each; one [DATA] line per shard tokenized here."""
    sources = [
        DocumentSource(args.data_dir / args.train_file, args.text_field, "--train-file"),
        DocumentSource(args.data_dir / args.val_file, args.text_field, "--val-file"),
    ]
    missing = [str(s.path) for s in sources if not s.path.exists()]
    if missing:
        raise FileNotFoundError(
            f"no {' or '.join(missing)}: put the text there (JSONL with a {args.text_field!r} field, .txt, or a "
            "save_to_disk directory), or name other files with --train-file / --val-file"
        )
    results = []
    for source in sources:
        started = time.monotonic()
        shard, prepared = prepare_tokens(source, tokenizer, cache_dir_of(args), args.prepare_timeout)
        if prepared:
            marker = shard.marker()
            console.line(f"[DATA] {source.path.name}: {marker['count']} tokens ({marker['dtype']}) prepared in "
                         f"{time.monotonic() - started:.1f}s into {shard.tokens_path}")  # fmt: skip
        results.append((shard, prepared))
    return results
