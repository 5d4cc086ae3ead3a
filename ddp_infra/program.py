"""The program `__main__.py` runs: the stack's one training world, from the stack's config."""

from __future__ import annotations

from typing import Any

from .components import DdpTrainingWorld, DdpTrainingWorldArgs
from .config import StackConfig

WORLD_NAME = "ddp"  # the stack's one world: its resources are named `ddp-<role>`


def build(config: StackConfig) -> dict[str, Any]:
    """Register the stack's world; return the stack outputs. Its outputs are the stack's own, under no
    prefix, and a stack deployed before 0.2.0 upgrades in place."""
    world = DdpTrainingWorld(WORLD_NAME, DdpTrainingWorldArgs(config=config, outputs_prefix="", previous_layout=True))
    return world.outputs
