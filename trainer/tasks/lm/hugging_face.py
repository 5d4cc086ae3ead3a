"""Hugging Face models and tokenizers for the lm task: from a local directory, or by Hub id; offline unless asked.

Offline is the default (--local-files-only, as seed 001 writes it): nothing is downloaded, and
HF_HUB_OFFLINE=1 holds for the whole process. --allow-download lifts that for the process (the image
sets HF_HUB_OFFLINE=1) and lets a --model-id be fetched with the token the stack mounts (HF_TOKEN, from
the hf-token Secret) into the Hugging Face cache (HF_HOME: /tmp/.cache/huggingface in the image).

transformers is imported only here, and only when a flag asks for it: the image leaves it out unless
built with --build-arg WITH_TRANSFORMERS=1 (see trainer/Dockerfile).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from trainer import contract as c

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models-dir", type=Path, default=c.claim_dir(c.MODELS_DIR, c.MODELS_MOUNT))
    model = parser.add_mutually_exclusive_group()
    model.add_argument("--model-local-dir", type=Path, help="a Hugging Face model directory (relative: under --models-dir)")
    model.add_argument("--model-id", help="a Hugging Face Hub model id, taken from the HF cache (or downloaded with --allow-download)")
    parser.add_argument("--tokenizer-local-dir", type=Path, help="defaults to the model's (relative: under --models-dir)")
    hub = parser.add_mutually_exclusive_group()
    hub.add_argument("--local-files-only", dest="allow_download", action="store_false",
                     help="nothing is downloaded (the default)")  # fmt: skip
    hub.add_argument("--allow-download", dest="allow_download", action="store_true",
                     help="let --model-id be downloaded from the Hub, with the token in HF_TOKEN")  # fmt: skip
    parser.set_defaults(allow_download=False)


@dataclass(frozen=True)
class Pretrained:
    """Where a model or tokenizer comes from, and the flag that said so (for messages)."""

    flag: str
    where: str  # a directory, or a Hub id
    local: bool


def model_of(args: argparse.Namespace) -> Pretrained | None:
    if args.model_local_dir is not None:
        return Pretrained("--model-local-dir", str(args.models_dir / args.model_local_dir), True)  # an absolute path wins the join
    if args.model_id is not None:
        return Pretrained("--model-id", args.model_id, False)
    return None


def tokenizer_of(args: argparse.Namespace) -> Pretrained | None:
    if args.tokenizer_local_dir is not None:
        return Pretrained("--tokenizer-local-dir", str(args.models_dir / args.tokenizer_local_dir), True)
    return model_of(args)


def set_hub_access(allow_download: bool) -> None:
    """Offline or online for this process, before transformers is imported."""
    for name in OFFLINE_VARIABLES:
        os.environ[name] = "0" if allow_download else "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:  # it reads the variables once, at import
        constants.HF_HUB_OFFLINE = not allow_download


def import_transformers(flag: str):
    try:
        import transformers
    except ImportError as exc:
        raise SystemExit(
            f"{flag} needs the transformers package, which is not installed: pip install transformers "
            "(for the image: docker build --build-arg WITH_TRANSFORMERS=1)"
        ) from exc
    return transformers


def hub_token() -> str | None:
    """The token the stack mounts, under either of its names (huggingface_hub itself reads only HF_TOKEN)."""
    return os.environ.get(c.HF_TOKEN.name) or os.environ.get(c.HUGGINGFACE_HUB_TOKEN.name) or None


def load(source: Pretrained, auto_class, allow_download: bool, **options):
    """`auto_class.from_pretrained`, with a failure named by its flag instead of a traceback."""
    if source.local and not Path(source.where).is_dir():
        raise SystemExit(f"{source.flag} {source.where}: no such directory (a relative path is taken under --models-dir)")
    try:
        return auto_class.from_pretrained(source.where, local_files_only=not allow_download, token=hub_token(), **options)
    except (OSError, ValueError) as exc:
        if source.local:
            problem = f"not a Hugging Face directory that {auto_class.__name__} can load"
        elif not allow_download:
            problem = (
                f"not in the Hugging Face cache ({os.environ.get(c.HF_HOME, '~/.cache/huggingface')}), and nothing is "
                "downloaded with --local-files-only (the default): add --allow-download to fetch it"
            )
        else:
            problem = "could not be downloaded (with the token in HF_TOKEN, if one is set)"
        raise SystemExit(f"{source.flag} {source.where}: {problem}: {exc}") from exc


def load_tokenizer(args: argparse.Namespace):
    """The transformers tokenizer the flags name; None when they name none (the byte tokenizer then)."""
    source = tokenizer_of(args)
    if source is None:
        return None
    set_hub_access(args.allow_download)
    transformers = import_transformers(source.flag)
    return load(source, transformers.AutoTokenizer, args.allow_download)
