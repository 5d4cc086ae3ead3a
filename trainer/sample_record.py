"""An opt-in record of the samples the ranks trained on (`--sample-record DIR`), and its reader.

With it a test proves from what was trained, not from the trainer's own report, that a run whose world
was resized, stopped and killed, and resumed from checkpoints trained every sample of each epoch once.

Each training process (one rank of one world) writes DIR/<world>-rank<rank>.jsonl, a JSON object a line:
  {"world": W, "rank": r, "world_size": n, "resumed_at_step": s}   first: s is the global step it went on from
  {"step": k, "epoch": e, "ids": [...]}                            then one per optimizer step it finished
`ids` are the dataset indices this rank fed the model in global step k, over all the step's micro-batches;
`epoch` counts from 0, as EpochSampler.set_epoch does. W is drawn by rank 0 when the world's record opens
(its clock in ns, and past every token already in DIR) and broadcast: the same on every rank of a world,
larger in each later one. Each line goes out in one unbuffered write, before the step can be checkpointed:
a checkpoint of step k means every rank's line of step k is in its file. A SIGKILL may cut a file's last
line; the reader leaves it out.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import Dataset

from trainer.distributed import Dist

FILE_NAME = re.compile(r"(\d+)-rank(\d+)\.jsonl")


class IndexedDataset(Dataset):
    """A dataset whose item i is (i, dataset[i]): the default collate makes a batch of them [ids, the
    dataset's own batch], so each sample's index goes with it through the loader's workers and prefetching.
    Given a list of indices (trainer/batch_loader.py), it answers that batch itself: [ids, dataset[indices]]."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int | list[int]) -> tuple[int, Any] | list[Any]:
        if isinstance(index, list):
            return [torch.tensor(index), self.dataset[index]]
        return index, self.dataset[index]


class SampleRecord:
    """This process's record: a header once the run is resumed, then a line per optimizer step."""

    def __init__(self, directory: Path, d: Dist):
        self.directory, self.d = Path(directory), d
        self.file = None
        self.ids: list[int] = []  # the current step's, so far

    def open(self, resumed_at_step: int) -> None:
        """Called by every rank once resume() is done: one broadcast, of rank 0's token for this world."""
        self.directory.mkdir(parents=True, exist_ok=True)
        token = torch.tensor([_next_token(self.directory) if self.d.is_main else 0], dtype=torch.int64, device=self.d.device)
        dist.broadcast(token, src=0)
        world = int(token.item())
        self.file = open(self.directory / f"{world}-rank{self.d.rank}.jsonl", "xb", buffering=0)  # noqa: SIM115 - open for the process's life
        self._write({"world": world, "rank": self.d.rank, "world_size": self.d.world_size, "resumed_at_step": resumed_at_step})

    def take(self, batch: list) -> Any:
        """The task's batch out of an IndexedDataset's, its ids kept for the step's line (they stay on the host)."""
        ids, batch = batch
        self.ids += ids.tolist()
        return batch

    def step(self, global_step: int, epoch: int) -> None:
        """The line of the optimizer step just finished, with the ids taken since the last one."""
        self._write({"step": global_step, "epoch": epoch, "ids": self.ids})
        self.ids = []

    def _write(self, line: dict[str, Any]) -> None:
        self.file.write((json.dumps(line, separators=(",", ":")) + "\n").encode())


def _next_token(directory: Path) -> int:
    """Rank 0's clock, and past every world already in `directory`, so a later world's is larger even
    when its rank 0 runs on a host whose clock is behind (as far as `directory` is shared)."""
    found = [int(m.group(1)) for path in directory.iterdir() if (m := FILE_NAME.fullmatch(path.name))]
    return max([time.time_ns(), *(token + 1 for token in found)])


# --- reading -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    step: int
    epoch: int
    rank: int
    ids: list[int]


@dataclass
class World:
    token: int
    world_size: int
    resumed_at_step: int
    ranks: set[int] = field(default_factory=set)  # those whose file has its header
    steps: list[Step] = field(default_factory=list)  # every rank's lines, file by file


def read_worlds(directory: Path) -> list[World]:
    """Every world's record in `directory`, in the order the worlds trained (by token)."""
    worlds: dict[int, World] = {}
    for path in sorted(Path(directory).iterdir()):
        if not FILE_NAME.fullmatch(path.name):
            continue
        lines = _complete_lines(path)
        if not lines:
            continue  # killed before its header was whole: it trained nothing
        header = lines[0]
        world = worlds.setdefault(header["world"], World(header["world"], header["world_size"], header["resumed_at_step"]))
        if (world.world_size, world.resumed_at_step) != (header["world_size"], header["resumed_at_step"]):
            raise ValueError(f"{path}: header {header} disagrees with another rank's of world {world.token}")
        world.ranks.add(header["rank"])
        world.steps += [Step(line["step"], line["epoch"], header["rank"], line["ids"]) for line in lines[1:]]
    for world in worlds.values():
        # every rank opens its record before its first step, which no rank finishes alone
        if world.steps and world.ranks != set(range(world.world_size)):
            raise ValueError(f"world {world.token} of {world.world_size} trained, but {directory} holds the record of "
                             f"ranks {sorted(world.ranks)} only")  # fmt: skip
    return [worlds[token] for token in sorted(worlds)]


def trained_samples(directory: Path) -> dict[int, list[int]]:
    """Per epoch (from 0), the ids of the samples that reached the final weights, sorted: a multiset, an id
    trained twice is there twice. The worlds are taken in order; one that resumed at step s redid every
    step after s, so it drops every earlier world's steps after s, even those beyond its own last step."""
    kept: list[Step] = []
    for world in read_worlds(directory):
        kept = [step for step in kept if step.step <= world.resumed_at_step] + world.steps
    per_epoch: dict[int, list[int]] = defaultdict(list)
    for step in kept:
        per_epoch[step.epoch] += step.ids
    return {epoch: sorted(ids) for epoch, ids in sorted(per_epoch.items())}


def _complete_lines(path: Path) -> list[dict[str, Any]]:
    """A record's lines, without a last one a kill cut short (it lacks its newline)."""
    text = path.read_text(encoding="utf-8")
    whole = text[: text.rfind("\n") + 1]
    try:
        return [json.loads(line) for line in whole.splitlines()]
    except ValueError as error:
        raise ValueError(f"{path}: a whole line that is not JSON ({error})") from None
