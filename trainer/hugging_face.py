"""Hugging Face models and tokenizers for the lm task, from local directories, offline (local_files_only).

transformers is imported only here, and only when a flag asks for it: the image leaves it out by
default; to have it, add the `transformers==` line of requirements-dev.txt (the version the tests run)
to trainer/requirements.txt.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from trainer import contract as c


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models-dir", type=Path, default=Path(os.environ.get(c.MODELS_DIR.name) or c.MODELS_MOUNT))
    parser.add_argument("--model-local-dir", type=Path, help="a Hugging Face model directory (relative: under --models-dir)")
    parser.add_argument("--tokenizer-local-dir", type=Path, help="defaults to --model-local-dir")


@dataclass(frozen=True)
class Pretrained:
    """Where a model or tokenizer comes from, and the flag that said so (for messages)."""

    flag: str
    where: str  # a directory


def model_of(args: argparse.Namespace) -> Pretrained | None:
    if args.model_local_dir is not None:
        return Pretrained("--model-local-dir", str(args.models_dir / args.model_local_dir))  # an absolute path wins the join
    return None


def tokenizer_of(args: argparse.Namespace) -> Pretrained | None:
    if args.tokenizer_local_dir is not None:
        return Pretrained("--tokenizer-local-dir", str(args.models_dir / args.tokenizer_local_dir))
    return model_of(args)


def import_transformers(flag: str):
    try:
        import transformers
    except ImportError as exc:
        raise SystemExit(
            f"{flag} needs the transformers package, which is not installed: "
            "pip install transformers (for the image, see the docstring of trainer/hugging_face.py)"
        ) from exc
    return transformers


def load(source: Pretrained, auto_class, **options):
    """`auto_class.from_pretrained` on a local directory only: a bad one is named by its flag, not taken for a hub id."""
    if not Path(source.where).is_dir():
        raise SystemExit(f"{source.flag} {source.where}: no such directory (a relative path is taken under --models-dir)")
    try:
        return auto_class.from_pretrained(source.where, local_files_only=True, **options)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{source.flag} {source.where}: not a Hugging Face directory that {auto_class.__name__} can load: {exc}") from exc


def load_tokenizer(args: argparse.Namespace):
    """The transformers tokenizer the flags name; None when they name none (the byte tokenizer then)."""
    source = tokenizer_of(args)
    if source is None:
        return None
    return load(source, import_transformers(source.flag).AutoTokenizer)
