"""Seed guide 001's smoke test: an MLP classifying synthetic data, identical on every run with one seed."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from trainer.flops import dense_flops_per_sample
from trainer.tasks.task import Task, save_state_dict


@dataclass(frozen=True)
class MLPConfig:
    features: int
    hidden: int
    classes: int


class MLP(nn.Sequential):
    """features -> hidden -> ReLU -> classes, remembering its config so a saved one can be rebuilt."""

    architecture = "mlp"

    def __init__(self, cfg: MLPConfig):
        super().__init__(nn.Linear(cfg.features, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, cfg.classes))
        self.cfg = cfg


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=4096, help="training samples; validation gets a quarter as many")
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)


def make_task(args: argparse.Namespace) -> Task:
    # One generator for the data, so it depends on the seed alone, never on the rank or world size.
    generator = torch.Generator().manual_seed(args.seed)
    n_train, n_val = args.samples, max(args.samples // 4, 1)
    x = torch.randn(n_train + n_val, args.features, generator=generator)
    teacher = torch.randn(args.features, args.classes, generator=generator)
    noise = 0.5 * torch.randn(n_train + n_val, args.classes, generator=generator)
    y = (x @ teacher / args.features**0.5 + noise).argmax(dim=1)
    model = MLP(MLPConfig(args.features, args.hidden, args.classes))
    return Task(
        model=model,
        train_set=TensorDataset(x[:n_train], y[:n_train]),
        val_set=TensorDataset(x[n_train:], y[n_train:]),
        loss=_loss,
        unit="samples",
        save=save_state_dict,
        flops_per_unit=dense_flops_per_sample(model),
    )


def _loss(model: nn.Module, batch) -> tuple[torch.Tensor, int]:
    x, y = batch
    return F.cross_entropy(model(x), y), y.shape[0]

