"""What a task must give for an exact run, checked before its first step, so that a task that breaks
the contract fails at start with the reason instead of training inexactly (docs/trainer.md, "Bring
your own model"):
- map-style datasets (a length and indexed samples): the epoch sampler orders indices, and a resume
  starts at the exact sample of its epoch;
- the same sample for the same index whenever it is read (random transforms drawn from the sample's
  index and the epoch, which the trainer gives a dataset with a `set_epoch` method, never from the
  global RNG, which a resume cannot replay);
- the same data on every rank (built from the run's seed, never from the rank or unseeded randomness);
- a loss that returns (the batch's mean loss, a 0-dim tensor; how many units it held, an int), checked
  at every call, so at the first step.
"""

from __future__ import annotations

import dataclasses
import hashlib
import numbers
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.data import IterableDataset

from trainer import distributed
from trainer.tasks.task import Task, set_epoch

UNITS = ("samples", "tokens")


class TaskContractError(ValueError):
    pass


def check_task(task: Task, name: str, d: distributed.Dist) -> Task:
    """`task` with its loss checked at every call; raises TaskContractError naming what is wrong."""
    if not isinstance(task.model, nn.Module):
        raise TaskContractError(f"task {name}: its model is a {type(task.model).__name__}, not a torch.nn.Module")
    if task.unit not in UNITS:
        raise TaskContractError(f"task {name}: unit {task.unit!r} is not one of {', '.join(UNITS)}")
    for field in ("loss", "save"):
        if not callable(getattr(task, field)):
            raise TaskContractError(f"task {name}: its {field} is not callable")
    for field in ("train_set", "val_set"):
        _check_indexed(name, field, getattr(task, field))
    if len(task.train_set) == 0:
        raise TaskContractError(f"task {name}: its train_set is empty")
    samples = _reads_alike(name, task.train_set)
    _same_on_every_rank(name, d, [len(task.train_set), len(task.val_set), *samples])
    return dataclasses.replace(task, loss=_checked(name, task.loss))


def _check_indexed(name: str, field: str, dataset: Any) -> None:
    if isinstance(dataset, IterableDataset) or not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise TaskContractError(
            f"task {name}: its {field} is a {type(dataset).__name__}, not a map-style dataset (__len__ and "
            f"__getitem__ by index): an exact resume starts at a sample's index, which a stream cannot"
        )


def _reads_alike(name: str, dataset: Any) -> list[str]:
    """The fingerprints of a few samples, each read twice, in epoch 0; raises if two reads differ."""
    set_epoch(dataset, 0)
    prints = []
    for index in sorted({0, len(dataset) // 2, len(dataset) - 1}):
        try:
            first, second = fingerprint(dataset[index]), fingerprint(dataset[index])
        except TaskContractError as exc:
            raise TaskContractError(f"task {name}: train_set[{index}]: {exc}") from None
        if first != second:
            raise TaskContractError(
                f"task {name}: train_set[{index}] differs between two reads; a sample must depend on its index (and "
                f"the epoch, given by set_epoch) alone: draw random transforms from a torch.Generator seeded with "
                f"the index and the epoch, not from the global RNG, or a resumed run trains other samples"
            )
        prints.append(first)
    return prints


def _same_on_every_rank(name: str, d: distributed.Dist, mine: list[Any]) -> None:
    everyone = distributed.every_rank(hashlib.sha256(repr(mine).encode()).hexdigest())
    differing = [rank for rank, theirs in enumerate(everyone) if theirs != everyone[0]]
    if differing:
        raise TaskContractError(
            f"task {name}: the data differs between ranks (rank 0's and rank {differing[0]}'s lengths or samples): "
            f"build it from the context's seed, not from the rank or unseeded randomness"
        )


def fingerprint(sample: Any) -> str:
    """A digest of a sample's values: tensors (dtype, shape, bytes), numbers, strings and containers of them."""
    digest = hashlib.sha256()

    def add(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().contiguous()
            digest.update(f"tensor {value.dtype} {tuple(value.shape)}".encode())
            digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(value, (str, bytes, numbers.Number)) or value is None:
            digest.update(repr(value).encode())
        elif isinstance(value, dict):
            for key in sorted(value, key=repr):
                add(key)
                add(value[key])
        elif isinstance(value, (list, tuple)):
            digest.update(f"{type(value).__name__} {len(value)}".encode())
            for item in value:
                add(item)
        elif hasattr(value, "__array__"):  # numpy arrays, PIL images
            add(torch.as_tensor(value.__array__()))
        else:
            raise TaskContractError(
                f"a sample holds a {type(value).__name__}: samples must be tensors, numbers, strings, arrays "
                f"or tuples, lists and dicts of them (what the DataLoader collates)"
            )

    add(sample)
    return digest.hexdigest()


def _checked(name: str, loss: Callable) -> Callable:
    """`loss`, its result checked at every call. Stateless, so that torch.compile traces the check once
    with the loss and keeps nothing of it in the compiled graph (a flag for "checked once" would be a
    guard, and its flip a second compilation)."""

    def loss_checked(model: nn.Module, batch: Any):
        result = loss(model, batch)
        _check_loss_result(name, result)
        return result

    return loss_checked


def _check_loss_result(name: str, result: Any) -> None:
    ok = (
        isinstance(result, tuple) and len(result) == 2
        and isinstance(result[0], torch.Tensor) and result[0].numel() == 1 and result[0].is_floating_point()
        # a count from a tensor's shape is an int; a SymInt while torch.compile traces a shape it keeps dynamic
        and isinstance(result[1], (int, torch.SymInt)) and not isinstance(result[1], bool) and result[1] > 0
    )  # fmt: skip
    if not ok:
        got = type(result).__name__ if not isinstance(result, tuple) else f"({', '.join(type(r).__name__ for r in result)})"
        raise TaskContractError(
            f"task {name}: its loss returned {got}; it must return (the batch's mean loss, a 0-dim float tensor, "
            f"how many {'/'.join(UNITS)} the batch held, an int above 0)"
        )
