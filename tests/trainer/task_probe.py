"""Tasks of one's own that break the trainer's contract, each in one way (test_trainer_user_task.py),
and one that keeps it, to break from."""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset, IterableDataset, TensorDataset

from trainer.tasks.task import Task, TaskContext, save_state_dict


def _loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y), y.shape[0]


def _data(seed: int, count: int = 64) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(count, 4, generator=generator), torch.randint(0, 2, (count,), generator=generator))


def keeps_the_contract(context: TaskContext) -> Task:
    width = context.options.get_int("width", 8, minimum=1)
    model = nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 2))
    return Task(model, _data(context.seed), _data(context.seed + 1, 16), _loss, "samples", save_state_dict)


class _NoisyReads(Dataset):
    """Adds noise from the global RNG at each read: a resumed run would train other samples."""

    def __init__(self, data: TensorDataset):
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        x, y = self.data[index]
        return x + 0.1 * torch.randn(x.shape), y


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(_data(0))


class _Objects(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int):
        return object(), 0


def noise_from_the_global_rng(context: TaskContext) -> Task:
    task = keeps_the_contract(context)
    return dataclasses.replace(task, train_set=_NoisyReads(task.train_set))


def a_stream(context: TaskContext) -> Task:
    return dataclasses.replace(keeps_the_contract(context), train_set=_Stream())


def samples_of_objects(context: TaskContext) -> Task:
    return dataclasses.replace(keeps_the_contract(context), train_set=_Objects())


def data_from_the_rank(context: TaskContext) -> Task:
    return dataclasses.replace(keeps_the_contract(context), train_set=_data(context.seed + int(os.environ.get("RANK", "0"))))


def a_loss_without_its_count(context: TaskContext) -> Task:
    return dataclasses.replace(keeps_the_contract(context), loss=lambda model, batch: _loss(model, batch)[0])


def no_task(context: TaskContext) -> dict:
    return {"model": None}


not_callable = 42
