"""The task the trainer runs as `python -m trainer.train shapes` (this package's entry point) or
`python -m trainer.train shapes.task:make_task`. Its options: `--task-option size=16` (pixels a
side), `samples=2048` (training images; validation gets a quarter as many), `channels=8` (the first
convolution's), `augment=true` (random flips and shifts of the training images)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from shapes.data import SHAPES, ShapeImages
from shapes.model import ShapeNet
from trainer.tasks.task import Task, TaskContext, save_state_dict


def make_task(context: TaskContext) -> Task:
    options = context.options
    size = options.get_int("size", 16, minimum=8, maximum=128)
    samples = options.get_int("samples", 2048, minimum=4)
    channels = options.get_int("channels", 8, minimum=1, maximum=512)
    augment = options.get_bool("augment", True)
    return Task(
        model=ShapeNet(channels, len(SHAPES)),
        train_set=ShapeImages(samples, size, context.seed, augment),
        val_set=ShapeImages(max(samples // 4, 1), size, context.seed + 1, augment=False),
        loss=_loss,
        unit="samples",
        save=save_state_dict,
        card={"classes": list(SHAPES), "image_size": size},
    )


def _loss(model: nn.Module, batch) -> tuple:
    images, labels = batch
    return F.cross_entropy(model(images), labels), labels.shape[0]
