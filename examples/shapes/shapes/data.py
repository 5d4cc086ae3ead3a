"""Images of three shapes (a square, a disc, a cross), drawn from the run's seed: nothing to download.

Each image is 1 x size x size: one shape of a random size at a random place, on noise. Training
images are flipped and shifted at random, and the same way for a sample and an epoch whenever it is
read: its draws come from a generator seeded with the run's seed, the epoch and the sample's index,
never from the global RNG (the trainer's contract for an exact resume).
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

SHAPES = ("square", "disc", "cross")


class ShapeImages(Dataset):
    def __init__(self, count: int, size: int, seed: int, augment: bool):
        generator = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, len(SHAPES), (count,), generator=generator)
        radius = torch.randint(2, size // 4 + 1, (count, 1, 1), generator=generator)
        center = torch.randint(size // 4, size - size // 4, (count, 2, 1, 1), generator=generator)
        rows, columns = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
        dy, dx = (rows - center[:, 0]).abs(), (columns - center[:, 1]).abs()
        drawn = torch.stack([
            torch.maximum(dy, dx) <= radius,  # square
            dy**2 + dx**2 <= radius**2,  # disc
            ((dy <= radius) & (dx <= 1)) | ((dx <= radius) & (dy <= 1)),  # cross
        ])  # fmt: skip
        shape = drawn[self.labels, torch.arange(count)].float()
        self.images = (shape + 0.3 * torch.randn(shape.shape, generator=generator)).unsqueeze(1)
        self.seed, self.augment, self.epoch = seed, augment, 0

    def set_epoch(self, epoch: int) -> None:
        """Called by the trainer before each epoch: the augmentation's draws depend on it."""
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.images[index]
        if self.augment:
            draws = torch.Generator().manual_seed(hash((self.seed, self.epoch, index)) % 2**63)
            if torch.rand((), generator=draws) < 0.5:
                image = image.flip(-1)
            image = image.roll(torch.randint(-1, 2, (2,), generator=draws).tolist(), dims=(-2, -1))
        return image, self.labels[index]
