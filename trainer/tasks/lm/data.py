"""The language model's samples: fixed-length blocks read from a memory-mapped token shard."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from trainer.tasks.lm.shards import Shard


class TokenBlocks(Dataset):
    """A shard's ids cut into consecutive blocks of seq_len + 1 (inputs are a block's first seq_len ids,
    targets the same shifted by one). Nothing is loaded: a block is read from the memory map when asked for."""

    def __init__(self, shard: Shard, seq_len: int):
        self.shard, self.block = shard, seq_len + 1
        self.tokens = shard.open()
        self.count = len(self.tokens) // self.block
        if self.count == 0:
            raise ValueError(f"{self.shard.tokens_path} holds {len(self.tokens)} tokens, fewer than one block of {self.block}")

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> torch.Tensor:
        if not 0 <= index < self.count:
            raise IndexError(index)
        start = index * self.block
        return torch.from_numpy(self.tokens[start : start + self.block].astype(np.int64))

    # A DataLoader worker started by spawn or forkserver gets the dataset pickled: it maps the shard
    # again instead of receiving a copy of every id.
    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "tokens"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.tokens = self.shard.open()
