"""Text for the language model: JSONL documents, a byte tokenizer, fixed-length token blocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch.utils.data import Dataset


class ByteTokenizer:
    """UTF-8 bytes plus an end-of-document token: no vocabulary file, nothing to download."""

    vocab_size = 257
    eos_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def read_texts(path: Path, field: str) -> Iterator[str]:
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)[field]
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: expected a JSON object with a {field!r} string") from exc


class TokenBlocks(Dataset):
    """The documents' tokens, joined with end-of-document tokens and cut into blocks of seq_len + 1
    (inputs are a block's first seq_len tokens, targets the same shifted by one)."""

    def __init__(self, texts: Iterator[str], encode: Callable[[str], list[int]], eos_id: int, seq_len: int):
        ids: list[int] = []
        for text in texts:
            ids.extend(encode(text))
            ids.append(eos_id)
        block = seq_len + 1
        usable = len(ids) // block * block
        if usable == 0:
            raise ValueError(f"the text holds {len(ids)} tokens, fewer than one block of {block}")
        self.blocks = torch.tensor(ids[:usable], dtype=torch.long).view(-1, block)

    def __len__(self) -> int:
        return self.blocks.shape[0]

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.blocks[index]
