"""Argument types the trainer's commands share."""

from __future__ import annotations

import argparse
import math


def seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds, 0 or more (0: off)")
    return value
