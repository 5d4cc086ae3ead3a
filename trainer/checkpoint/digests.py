"""Each checkpoint file's CRC-32: what tells a file damaged on disk at its own size (a flipped bit, a
bad copy) from the bytes its writer wrote. torch.distributed.checkpoint reads such a file without a
word, so the commit record carries the digests and a resume checks them first.

The ranks share the reading: rank r reads the files r, r + world, r + 2·world, ... of the sorted
list, so a checkpoint is read once whatever the world's size. The collectives run on the group the
checkpoint writer uses (trainer/checkpoint/sharded.py), on every rank alike.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import torch.distributed as dist

from trainer.distributed import every_rank

_CHUNK = 8 << 20


def crc32_of(path: Path) -> str:
    crc = 0
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"


def share_of(names: list[str], rank: int, world_size: int) -> list[str]:
    return sorted(names)[rank::world_size]


def of_checkpoint(directory: Path, group: dist.ProcessGroup) -> dict[str, str]:
    """Every file's digest, read by the ranks in turn; the same dict on every rank.
    Raises OSError on every rank when any rank cannot read its share back."""
    listing = [sorted(p.name for p in directory.iterdir() if p.is_file())] if dist.get_rank(group) == 0 else [None]
    dist.broadcast_object_list(listing, group_src=0, group=group)  # one listing: a shared volume's may lag elsewhere
    try:
        mine = {name: crc32_of(directory / name) for name in _mine(listing[0], group)}
    except OSError as exc:
        mine = {"": f"rank {dist.get_rank(group)}: {type(exc).__name__}: {exc}"}
    found: dict[str, str] = {}
    for share in every_rank(mine, group):
        if "" in share:
            raise OSError(f"reading the checkpoint back failed on {share['']}")
        found.update(share)
    return found


def mismatches(directory: Path, digests: dict[str, str], group: dist.ProcessGroup) -> list[str]:
    """What differs from `digests` (read by the ranks in turn), a line per file; the same list on every rank."""
    mine = []
    for name in _mine(list(digests), group):
        try:
            actual = crc32_of(directory / name)
        except OSError as exc:
            actual = f"unreadable ({type(exc).__name__}: {exc})"
        if actual != digests[name]:
            mine.append(f"{name}'s CRC-32 is {actual}, its record says {digests[name]}")
    return sorted(line for share in every_rank(mine, group) for line in share)


def _mine(names: list[str], group: dist.ProcessGroup) -> list[str]:
    return share_of(names, dist.get_rank(group), dist.get_world_size(group))
