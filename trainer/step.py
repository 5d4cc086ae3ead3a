"""One optimizer step, read top to bottom: micro-batches forward and backward under DDP, clip, step.

The step owns how the model is trained: DDP's wrapper and torch.compile around the model and its task's
loss together, the mixed precision and its loss scaler, the optimizer. Its losses stay on the device,
added up in a StepWindow that the loop reads only at its next sync.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager, nullcontext
from typing import Iterator

import torch

from trainer import compile_cache, profiling, throughput
from trainer.lines import Compiled
from trainer.optimizer import make_adamw
from trainer.profiling import part
from trainer.sample_record import SampleRecord
from trainer.tasks.task import Task, to_device
from trainer.train_config import TrainConfig


class OptimizerStep:
    def __init__(self, task: Task, model: torch.nn.Module, cfg: TrainConfig, device: torch.device,
                 sample_record: SampleRecord | None):  # fmt: skip
        self.model, self.device, self.sample_record = model, device, sample_record
        self.grad_accum, self.grad_clip, self.batch_seconds = cfg.grad_accum, cfg.grad_clip, cfg.batch_seconds
        if cfg.tf32:
            throughput.use_tf32(device)
        self.ddp = throughput.wrap_ddp(throughput.ModelWithLoss(model, task.loss), device, cfg.grad_compression)
        compiling = cfg.compile if cfg.compile is not None else device.type == "cuda"
        self.compiled = throughput.maybe_compile(self.ddp, compiling, cfg.compile_mode)  # what the step calls: DDP, compiled or not
        self.optimizer = make_adamw(model, cfg.lr, cfg.weight_decay, cfg.betas, device)
        self.amp_dtype = amp_dtype(device) if cfg.amp else None
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.amp_dtype == torch.float16)
        self._first_step: float | None = None  # when this process's first step started, until it is said
        self._said_compiled = self.compiled is self.ddp  # nothing to say of a step that is not compiled

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def __call__(self, batches: Iterator, window: StepWindow) -> None:
        """One optimizer step over grad_accum micro-batches; gradients are all-reduced once, on the last.
        Its losses are added to `window`, on the device."""
        accum = self.grad_accum
        if not self._said_compiled and self._first_step is None:
            self._first_step = time.perf_counter()
        for micro in range(accum):
            with part(profiling.DATA):
                batch = next(batches)
            if self.sample_record:
                with part(profiling.SAMPLE_RECORD):
                    batch = self.sample_record.take(batch)  # its ids, kept on the host
            with part(profiling.TO_DEVICE):
                batch = to_device(batch, self.device)
            sync = micro == accum - 1
            with nullcontext() if sync else self.ddp.no_sync(), self.autocast(), window.timing_forward(), part(profiling.FORWARD):
                loss, n = self.compiled(batch)
                if self.batch_seconds:
                    time.sleep(self.batch_seconds)  # as the batch's kernels would keep the device busy
            with part(profiling.BACKWARD):  # DDP's forward, in no_sync or not, decided whether it all-reduces
                self.scaler.scale(loss / accum if accum > 1 else loss).backward()
            with part(profiling.LOSS_SUM):
                window.add(loss, n)
        if self.grad_clip > 0:
            with part(profiling.CLIP):
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        with part(profiling.OPTIMIZER):
            self.scaler.step(self.optimizer)
            self.scaler.update()
        with part(profiling.ZERO_GRAD):
            self.optimizer.zero_grad(set_to_none=True)
        window.steps += 1

    def first_compiled_step(self) -> Compiled | None:
        """Once, after the first step of a compiled step: how long it took on the host, and how many of its
        graphs were loaded from the compile cache (trainer/compile_cache.py) instead of compiled."""
        if self._said_compiled or self._first_step is None:
            return None
        self._said_compiled = True
        loaded, graphs = compile_cache.graphs_from_the_cache()
        where = os.environ.get(compile_cache.CACHE_DIR_ENV, "torch's default")
        return Compiled(time.perf_counter() - self._first_step, loaded, graphs, where)

    def autocast(self):
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    @property
    def precision(self) -> str:
        """The precision it trains in, as a checkpoint records it."""
        return {torch.bfloat16: "bf16", torch.float16: "fp16", None: "fp32"}[self.amp_dtype]


class StepWindow:
    """This rank's figures since the last sync: the loss summed on the device, read only at the sync."""

    def __init__(self, device: torch.device):
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.units = 0
        self.steps = 0
        self.started = time.perf_counter()
        self._cuda = device.type == "cuda"
        self._forward_s = 0.0
        self._forward_events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    @contextmanager
    def timing_forward(self):
        """Times a forward pass, this rank's own work: on the host's clock, or the GPU's events on CUDA."""
        if self._cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._forward_events.append((start, end))
        else:
            started = time.perf_counter()
            yield
            self._forward_s += time.perf_counter() - started

    def forward_seconds(self) -> float:
        if self._forward_events:
            self._forward_events[-1][1].synchronize()  # the last forward is done; the backward may still run
            self._forward_s += sum(start.elapsed_time(end) for start, end in self._forward_events) / 1e3
            self._forward_events.clear()
        return self._forward_s

    def add(self, loss: torch.Tensor, units: int) -> None:
        """One micro-batch's mean loss over its `units`: a single kernel, no host sync."""
        self.loss_sum.add_(loss.detach(), alpha=units)
        self.units += units


def amp_dtype(device: torch.device) -> torch.dtype | None:
    if device.type != "cuda":
        return None  # CPU autocast is slower than fp32 for these models
    # Native bf16 only (compute capability 8.0 on): where torch would emulate it (T4, V100) it is slow,
    # and fp16 with a loss scaler is what those GPUs run fast.
    return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16
