"""Each rank's random streams: the seed a rank's stream starts from, and the state a checkpoint keeps of it.

The run's seed initializes the model, the same on every rank, and orders the data (trainer/sampler.py).
Dropout draws from the global streams (Python's and torch's, CPU and CUDA): each rank seeds them with
its own `rank_seed`, and a checkpoint keeps their state so that a resume goes on where they stopped.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import torch


def rank_seed(seed: int, rank: int, step: int) -> int:
    """The seed of one rank's random stream (dropout) when it starts at global step `step`.

    Distinct per rank, so the ranks drop different units; distinct from the run's seed, so rank 0 does not
    replay the numbers that initialized the weights; the same for the same run, so runs repeat.
    """
    digest = hashlib.sha256(f"run seed {seed}, rank {rank}, step {step}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def seed_all(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def rng_state(device: torch.device) -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
        "python": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None:
        torch.cuda.set_rng_state(state["cuda"])
    random.setstate(state["python"])
