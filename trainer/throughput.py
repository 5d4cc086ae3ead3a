"""How the model is run fast: TF32 matmuls, torch.compile, and DDP's gradient exchange."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

# --grad-compression: the DDP communication hook that shrinks each gradient bucket before its all-reduce
GRAD_COMPRESSION = {"none": None, "bf16": default_hooks.bf16_compress_hook}
# --compile-mode: torch.compile's modes (torch._inductor.list_mode_options, held equal by a test), named
# here so that parsing the flags does not import the compiler
COMPILE_MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")


def use_tf32(device: torch.device) -> None:
    """fp32 matmuls and convolutions on tensor cores (10-bit mantissa), as autocast leaves some ops in fp32."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        torch.backends.cudnn.conv.fp32_precision = "tf32"


class ModelWithLoss(nn.Module):
    """The model and its task's loss as one forward: what DDP wraps and torch.compile traces. Compiled
    together, the loss's kernels fuse with the head's, so no full-precision copy of the logits is kept
    for the backward pass (nanoGPT computes its loss inside its compiled forward for the same reason).
    With the loss outside the graph, a GPT-2-sized vocabulary on the CPU took twice the time per step."""

    def __init__(self, model: nn.Module, loss: Callable[[nn.Module, Any], tuple[torch.Tensor, int]]):
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, batch: Any) -> tuple[torch.Tensor, int]:
        return self.loss(self.model, batch)


def wrap_ddp(model: nn.Module, device: torch.device, grad_compression: str) -> DistributedDataParallel:
    if grad_compression not in GRAD_COMPRESSION:
        raise ValueError(f"--grad-compression {grad_compression!r}: allowed are {', '.join(GRAD_COMPRESSION)}")
    # gradient_as_bucket_view: the gradients live in DDP's all-reduce buckets, no copy in and out of them
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                  gradient_as_bucket_view=True)  # fmt: skip
    hook = GRAD_COMPRESSION[grad_compression]
    if hook is not None:
        ddp.register_comm_hook(dist.group.WORLD, hook)
    return ddp


def maybe_compile(ddp: DistributedDataParallel, enabled: bool, mode: str = "default") -> nn.Module:
    """The module the training step calls. Compiling the DDP wrapper (not the model inside it) lets torch
    split the graph at DDP's bucket boundaries, so all-reduces overlap the backward pass; the model
    itself stays uncompiled, so its state dict keeps its own names. `mode` is one of COMPILE_MODES."""
    return torch.compile(ddp, mode=mode) if enabled else ddp
