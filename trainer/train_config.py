"""What a run is told: the loop's and the optimizer step's settings, from `trainer.train`'s flags."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainConfig:
    epochs: int
    batch: int  # per process and micro-batch
    lr: float
    seed: int
    grad_accum: int = 1
    weight_decay: float = 0.0  # on the 2-D weights of matmuls only (trainer/optimizer.py)
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1
    grad_clip: float = 0.0
    checkpoint_every: int = 0  # optimizer steps; 0: at epoch ends (and on SIGTERM) only
    checkpoint_every_seconds: float = 0.0  # since the last checkpoint, by rank 0's clock; 0: not by time
    keep_checkpoints: int = 3
    log_every: int = 10
    workers: int = 0
    amp: bool = True
    compile: bool | None = None  # torch.compile the model; None: on CUDA only
    compile_mode: str = "default"  # one of throughput.COMPILE_MODES
    tf32: bool = True  # on CUDA
    grad_compression: str = "none"  # a key of throughput.GRAD_COMPRESSION
    batch_seconds: float = 0.0  # each training micro-batch also waits this long (a pace; no figure changes)
