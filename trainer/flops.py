"""Model FLOPs utilization (MFU): the FLOPs a step must do, over what the device could do in its time.

A model's training FLOPs per unit (token or sample) count forward and backward (three times the
forward's 2 FLOPs per multiply-add), as in nanoGPT's estimate_mfu and the PaLM paper's appendix B.
The peak is the GPU's dense bf16/fp16 tensor-core figure from its datasheet, whatever precision the
run uses; the CPU, or a GPU not in the table, has none, and MFU is then not reported.
"""

from __future__ import annotations

import re

import torch
from torch import nn

# Dense (no sparsity) bf16 tensor-core peaks; fp16 where the GPU has no native bf16 (T4, V100).
# Keyed by a word of torch.cuda.get_device_name(); the first match wins, so variants come first.
PEAK_FLOPS = (
    (("H100", "PCIe"), 756e12),
    (("H100", "NVL"), 835e12),
    (("H100",), 989e12),  # SXM
    (("H200",), 989e12),
    (("A100",), 312e12),
    (("L40S",), 362e12),
    (("A10",), 125e12),
    (("L4",), 121e12),
    (("V100",), 125e12),  # SXM2 fp16
    (("T4",), 65e12),  # fp16
)


def peak_flops(device: torch.device) -> float | None:
    """The device's peak FLOP/s, or None where none is known (the CPU, an unlisted GPU)."""
    if device.type != "cuda":
        return None
    return peak_flops_of(torch.cuda.get_device_name(device))


def peak_flops_of(device_name: str) -> float | None:
    words = set(re.split(r"[\s_-]+", device_name))
    return next((peak for names, peak in PEAK_FLOPS if words.issuperset(names)), None)


def transformer_flops_per_token(params: int, n_layer: int, d_model: int, seq_len: int) -> float:
    """6 per parameter (the matmuls' forward and backward) plus attention's scores and weighted sum,
    12 * layers * width * sequence, which depend on the sequence and so on no parameter.
    `params` leaves out the position embedding: a lookup, no matmul."""
    return 6 * params + 12 * n_layer * d_model * seq_len


def dense_flops_per_sample(model: nn.Module) -> float:
    """A network of matmuls only (the smoke task's MLP): 6 per parameter per sample."""
    return 6 * sum(p.numel() for p in model.parameters())


def mfu(flops_per_unit: float | None, units_per_s_per_device: float, peak: float | None) -> float | None:
    if flops_per_unit is None or peak is None:
        return None
    return flops_per_unit * units_per_s_per_device / peak
