"""A saved model that loads on its own: `python -m trainer.load DIR`, or trainer.load.load_model(DIR) in Python.

Every /out/<run>/epoch-N/ (and `best`, which points at one) holds the model's weights and its card,
model.json: the architecture and its config, the task that trained it, and what else its user needs
to know (the tokenizer its token ids belong to, where the task names one). The model is rebuilt
from the card alone, so none of the training flags is needed. A Hugging Face model's directory has
its own config.json and tokenizer; its card says so, and it loads through transformers.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.tasks.lm.model import GPT, GPTConfig
from trainer.outputs import write_json
from trainer.tasks.smoke import MLP, MLPConfig

CARD = "model.json"
WEIGHTS = "model.pt"
HUGGING_FACE = "hugging-face"
ARCHITECTURES = {"gpt": (GPT, GPTConfig), "mlp": (MLP, MLPConfig)}  # the card's name: model class, config class


def write_card(directory: Path, model: nn.Module, card: dict[str, Any]) -> None:
    """The card beside a model its task has saved in `directory`."""
    write_json(directory / CARD, {**_architecture_of(model), **card})


def _architecture_of(model: nn.Module) -> dict[str, Any]:
    if hasattr(model, "save_pretrained"):  # transformers: the config is the directory's own config.json
        return {"architecture": HUGGING_FACE}
    name = getattr(model, "architecture", None)
    if name not in ARCHITECTURES:  # a model of a task of one's own: its card says what it is, load_model refuses it
        return {"architecture": f"{type(model).__module__}.{type(model).__qualname__}"}
    return {"architecture": name, "config": asdict(model.cfg)}


def read_card(directory: Path) -> dict[str, Any]:
    path = Path(directory) / CARD
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no model card; the trainer writes one in every epoch-N directory of a run")
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path}: not a JSON model card: {exc}") from exc


def load_model(directory: str | Path) -> nn.Module:
    """The model saved in `directory`, on the CPU, in eval mode (dropout off)."""
    directory = Path(directory)
    card = read_card(directory)
    name = card.get("architecture")
    if name == HUGGING_FACE:
        return _load_hugging_face(directory).eval()
    if name not in ARCHITECTURES:
        known = ", ".join([*ARCHITECTURES, HUGGING_FACE])
        raise ValueError(f"{directory / CARD}: architecture {name!r} is none this loader rebuilds ({known})")
    model_class, config_class = ARCHITECTURES[name]
    model = model_class(config_class(**card["config"]))
    model.load_state_dict(torch.load(directory / WEIGHTS, map_location="cpu", weights_only=True))
    return model.eval()


def _load_hugging_face(directory: Path) -> nn.Module:
    try:
        from transformers import AutoModelForCausalLM
    except ImportError as exc:
        raise ImportError(f"{directory} holds a Hugging Face model: loading it needs the transformers package") from exc
    return AutoModelForCausalLM.from_pretrained(directory, local_files_only=True)


def params_sum(model: nn.Module) -> float:
    """A fingerprint of the weights: equal runs give equal sums, to the last bit (the [DONE] line's params_sum)."""
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.load", description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="a run's epoch-N or best directory")
    args = parser.parse_args(argv)
    try:
        model = load_model(args.directory)
        card = read_card(args.directory)
    except (OSError, ValueError, ImportError) as exc:
        print(f"trainer.load: {exc}", file=sys.stderr)
        return 1
    parameters = sum(p.numel() for p in model.parameters())
    print(f"[LOAD] {args.directory} architecture={card['architecture']} task={card.get('task', '?')} "
          f"parameters={parameters} params_sum={params_sum(model)}")  # fmt: skip
    print(json.dumps(card, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
