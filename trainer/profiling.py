"""The parts of a training step, named in a torch.profiler trace: bench/profile_step.py prices each part
of the trainer's step against the same part of a reference loop by these names.

A part is named only while a profiler records (a `record_function` costs a few microseconds a call,
which a step on the CPU would feel); otherwise it is an empty context."""

from __future__ import annotations

from contextlib import nullcontext

import torch

DATA = "part: data loader"
SAMPLE_RECORD = "part: sample record"
TO_DEVICE = "part: batch to the device"
FORWARD = "part: forward and loss"
BACKWARD = "part: backward and all-reduce"
LOSS_SUM = "part: loss sum"
CLIP = "part: gradient clip"
OPTIMIZER = "part: optimizer"
ZERO_GRAD = "part: zero grad"
HANG_WATCH = "part: hang watch beat"
FIGURES = "part: figures sync"
PARTS = (DATA, SAMPLE_RECORD, TO_DEVICE, FORWARD, BACKWARD, LOSS_SUM, CLIP, OPTIMIZER, ZERO_GRAD, HANG_WATCH, FIGURES)


def part(name: str):
    return torch.profiler.record_function(name) if torch.autograd._profiler_enabled() else nullcontext()
