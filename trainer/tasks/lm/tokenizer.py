"""Tokenizers as the token cache uses them: a batch of documents in, their ids joined with end-of-document out.

Each has an `identity`, a string that changes whenever its output could: the cache is keyed on it.
"""

from __future__ import annotations

import hashlib
import json
from itertools import chain

import numpy as np


class ByteTokenizer:
    """UTF-8 bytes plus an end-of-document token: no vocabulary file, nothing to download."""

    vocab_size = 257
    eos_id = 256
    identity = "bytes+eos-256"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def encode_batch(self, texts: list[str]) -> np.ndarray:
        encoded = [text.encode("utf-8") for text in texts]
        ends = np.cumsum([len(e) for e in encoded])
        return np.insert(np.frombuffer(b"".join(encoded), np.uint8).astype(np.uint16), ends, self.eos_id)


class HuggingFaceTokenizer:
    """A transformers tokenizer, called on a whole batch (a fast one encodes it in parallel, in Rust)."""

    def __init__(self, tokenizer):
        if tokenizer.eos_token_id is None:
            raise SystemExit(f"the tokenizer {tokenizer.name_or_path} has no end-of-sequence token to separate documents")
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self.eos_id = tokenizer.eos_token_id
        self.identity = f"{type(tokenizer).__name__}:{self.vocab_size}:{self.eos_id}:{_definition_hash(tokenizer)}"

    def encode_batch(self, texts: list[str]) -> np.ndarray:
        ids = self.tokenizer(texts, return_attention_mask=False)["input_ids"]
        count = sum(len(i) for i in ids) + len(ids)
        return np.fromiter(chain.from_iterable(chain(i, (self.eos_id,)) for i in ids), np.int64, count)


def _definition_hash(tokenizer) -> str:
    """A fast tokenizer's whole definition (vocabulary, merges, normalizer, special tokens); a slow one's vocabulary."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    definition = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(definition.encode()).hexdigest()[:16]
