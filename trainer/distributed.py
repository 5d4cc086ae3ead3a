"""The process group of one training process, as torchrun describes it in the env."""

from __future__ import annotations

import gc
import os
import pickle
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    timeout: timedelta  # how long a collective waits for a peer (--pg-timeout)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init(device_choice: str, timeout_s: float) -> Dist:
    """Join the process group torchrun prepared; a plain `python -m trainer.train` is a world of one."""
    use_cuda = device_choice == "cuda" or (device_choice == "auto" and torch.cuda.is_available())
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    backend = "nccl" if use_cuda else "gloo"
    timeout = timedelta(seconds=timeout_s)
    if "RANK" in os.environ:
        dist.init_process_group(backend, timeout=timeout, device_id=device if use_cuda else None)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    return Dist(dist.get_rank(), dist.get_world_size(), local_rank, device, timeout)


def background_group(d: Dist) -> dist.ProcessGroup:
    """A gloo group of every rank for a background thread's collectives (checkpoint writes).

    Its own group, so they never interleave with the training loop's; gloo, since they carry
    CPU objects even when training runs on NCCL. Every rank must create it, in the same order.
    """
    return dist.new_group(backend="gloo", timeout=d.timeout)


def sum_across(d: Dist, values: list[float | torch.Tensor]) -> list[float]:
    """One small all-reduce carrying several numbers (losses, counts, the stop flag) at once.

    Values already on the device stay there until the sum is read: the one host sync of the call.
    """
    tensor = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=d.device) for v in values])
    dist.all_reduce(tensor)
    return tensor.tolist()


def main_decides(d: Dist, value: Any) -> Any:
    """Rank 0's `value` on every rank, so all ranks act on one decision."""
    data = pickle.dumps(value) if d.is_main else b""
    size = torch.tensor([len(data)], dtype=torch.int64, device=d.device)
    dist.broadcast(size, src=0)
    buffer = _to_tensor(data, int(size.item()), d.device)
    dist.broadcast(buffer, src=0)
    return pickle.loads(_to_bytes(buffer))


def every_rank(value: Any, group: dist.ProcessGroup | None = None) -> list[Any]:
    """Each rank's `value`, by rank, on every rank of `group` (the world's by default; one
    collective: call it on every rank)."""
    values: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(values, value, group=group)
    return values


def _to_tensor(data: bytes, length: int, device: torch.device) -> torch.Tensor:
    padded = bytearray(data.ljust(length, b"\0"))
    return torch.frombuffer(padded, dtype=torch.uint8).to(device) if length else torch.zeros(0, dtype=torch.uint8, device=device)


def _to_bytes(tensor: torch.Tensor) -> bytes:
    return bytes(tensor.cpu().tolist())


def shutdown() -> None:
    """Leave the group together and release it before the interpreter exits.

    A rank that exits while a peer still tears down can abort that peer (the store host leaves
    first), and a group freed by interpreter finalization instead of here can abort at exit.
    """
    if dist.is_initialized():
        gc.collect()  # drop what still holds the group (a DDP wrapper in a reference cycle)
        dist.barrier()
        dist.destroy_process_group()
