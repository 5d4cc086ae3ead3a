"""The training loop's loaders (trainer/batch_loader.py): one indexing per batch where a dataset takes
a list of indices, and the very batches DataLoader makes a sample at a time."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

from trainer.batch_loader import batch_loader, takes_index_lists
from trainer.sample_record import IndexedDataset
from trainer.sampler import EpochSampler


class Indexings:
    """Counts TensorDataset's indexings while patched in."""

    def __init__(self, monkeypatch):
        self.calls, original = 0, TensorDataset.__getitem__

        def counted(dataset, index):
            self.calls += 1
            return original(dataset, index)

        monkeypatch.setattr(TensorDataset, "__getitem__", counted)


class Noisy(TensorDataset):
    """A TensorDataset of one's own with a transform per sample: read one index at a time."""

    def __getitem__(self, index: int):
        x, y = super().__getitem__(index)
        return x + torch.randn(x.shape, generator=torch.Generator().manual_seed(index)), y


class Squares(Dataset):
    """A dataset of its own: item i is (i, i*i), one at a time."""

    def __len__(self) -> int:
        return 50

    def __getitem__(self, index: int):
        return torch.tensor(float(index)), torch.tensor(index * index)


def data(samples: int = 100, kind: type[TensorDataset] = TensorDataset) -> TensorDataset:
    generator = torch.Generator().manual_seed(3)
    return kind(torch.randn(samples, 6, generator=generator), torch.randint(0, 4, (samples,), generator=generator))


def same_batches(left: list, right: list) -> bool:
    def same(a, b) -> bool:
        if isinstance(a, torch.Tensor):
            return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))

    return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right))


def sampler_of_rank_1() -> EpochSampler:
    sampler = EpochSampler(100, world_size=2, rank=1, seed=5, samples_per_step=8)
    sampler.set_epoch(3, start=32)  # the world had trained 2 steps of this epoch
    return sampler


@pytest.mark.parametrize("wrap", [lambda d: d, IndexedDataset], ids=["tensors", "with the sample record's ids"])
def test_an_epoch_resumed_mid_way_gives_the_very_batches_of_a_sample_at_a_time_in_one_indexing_each(wrap, monkeypatch):
    def epoch(loader_of) -> list:
        return list(loader_of(wrap(dataset), 8, sampler=sampler_of_rank_1(), drop_last=True))

    dataset = data()
    expected = epoch(DataLoader)
    indexings = Indexings(monkeypatch)
    got = epoch(batch_loader)
    assert same_batches(got, expected)
    assert len(got) == len(sampler_of_rank_1()) // 8 > 1
    assert indexings.calls == len(got)  # one indexing a batch, not 8


def test_a_validation_shard_keeps_its_last_short_batch():
    dataset = data(37)
    shard = Subset(dataset, range(1, 37, 2))
    assert same_batches(list(batch_loader(shard, 5)), list(DataLoader(shard, 5)))
    assert [len(batch[1]) for batch in batch_loader(shard, 5)] == [5, 5, 5, 3]


@pytest.mark.parametrize("dataset", [Squares(), data(40, Noisy)], ids=["a dataset of its own", "a TensorDataset with its own indexing"])
def test_a_dataset_that_takes_one_index_at_a_time_is_read_as_dataloader_reads_it(dataset):
    assert not takes_index_lists(dataset) and not takes_index_lists(IndexedDataset(dataset))
    assert same_batches(list(batch_loader(dataset, 7, drop_last=True)), list(DataLoader(dataset, 7, drop_last=True)))


def test_a_tensor_dataset_under_a_subset_and_the_sample_records_ids_takes_index_lists():
    assert takes_index_lists(Subset(IndexedDataset(data()), [1, 2]))
