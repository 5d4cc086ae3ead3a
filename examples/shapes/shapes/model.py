"""A small convolutional classifier: two convolutions, a global average, a linear head."""

from __future__ import annotations

from torch import nn


class ShapeNet(nn.Sequential):
    def __init__(self, channels: int, classes: int):
        super().__init__(
            nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * channels, classes),
        )  # fmt: skip
