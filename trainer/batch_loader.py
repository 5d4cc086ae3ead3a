"""The training loop's loaders: a dataset's batches in the sampler's order, as DataLoader makes them.

A dataset that takes a list of indices at once (a TensorDataset, also under a Subset or the sample
record's IndexedDataset) is read one indexing per batch: the same tensors, bit for bit, as DataLoader's
call per sample and stack of them (tests/trainer/test_trainer_batch_loader.py). On a CPU world of the
smoke task those 256 calls and the stack were about a third of a step's CPU; any other dataset is read
a sample at a time and collated, as DataLoader does.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler, SequentialSampler, Subset, TensorDataset

from trainer.sample_record import IndexedDataset


def takes_index_lists(dataset: Dataset) -> bool:
    """Whether dataset[[i, j, ...]] is the batch of items i, j, ... as DataLoader's default collate makes it."""
    if isinstance(dataset, (Subset, IndexedDataset)):
        return takes_index_lists(dataset.dataset)
    # a subclass with an indexing of its own (a transform per sample) is read as it reads itself
    return isinstance(dataset, TensorDataset) and type(dataset).__getitem__ is TensorDataset.__getitem__


def batch_loader(dataset: Dataset, batch: int, sampler: Sampler[int] | None = None, drop_last: bool = False, **options: Any) -> DataLoader:
    """DataLoader(dataset, batch, sampler=sampler, drop_last=drop_last, **options), each batch one indexing where the dataset allows it."""
    if not takes_index_lists(dataset):
        return DataLoader(dataset, batch, sampler=sampler, drop_last=drop_last, **options)
    batches = BatchSampler(sampler if sampler is not None else SequentialSampler(dataset), batch, drop_last)
    return DataLoader(dataset, batch_size=None, sampler=batches, **options)
