"""The images imported once for all the clusters of this machine. Importing the trainer's 2.7-GiB
archive costs a cluster tens of seconds of CPU and about 5 GiB of disk, and each new build of the
image had every cluster of a test run import it again. The seed is a store no containerd runs on,
`<cache>/cluster/.image-seed/containerd`, a copy made of hard links of the last store that imported
an image: a cluster whose store lacks an image that the seed holds takes a copy of the seed instead
(containerd.copy_store: seconds, and no disk). A lock makes clusters that start at once import an
image once: the first imports it, the others wait for it and copy."""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .containerd import Containerd, copy_store, recorded_images

# Below this much to import, an import costs less than a copy of the seed (the pause image: 1 MiB).
WORTH_COPYING = 64 * 2**20


class ImageSeed:
    def __init__(self, home: Path):
        self.home = home
        self.store = home / "containerd"

    @contextmanager
    def held(self, images: dict[str, tuple[str, Path]]) -> Iterator[None]:
        """The seed to this process alone while a cluster that wants `images` copies it or imports them
        into its own store; a cluster whose images are not worth copying goes on at once."""
        if _size(images, {ref for ref, _ in images.values()}) < WORTH_COPYING:
            yield
            return
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def give(self, target: Containerd, images: dict[str, tuple[str, Path]]) -> bool:
        """Makes `target`'s store (no containerd running on it) a copy of the seed where the store lacks
        images worth copying and the seed holds every image wanted, on the same file system (a store
        on a disk of its own imports). Returns whether it did."""
        wanted = {ref for ref, _ in images.values()}
        if _size(images, wanted - target.recorded_images()) < WORTH_COPYING:
            return False
        if not wanted <= recorded_images(self.store) or not _same_file_system(self.store, target.root):
            return False
        copy_store(self.store, target.root)
        return True

    def worth_taking(self, source: Containerd, images: dict[str, tuple[str, Path]], imported: list[str]) -> bool:
        """Whether `source`'s store, which has just imported these of `images`, is worth the seed's taking
        a copy of, and can be copied to it (on its file system)."""
        return _size(images, set(imported)) >= WORTH_COPYING and _same_file_system(self.home, source.root)

    def take(self, source: Containerd) -> None:
        """The seed made a copy of `source`'s store (no containerd running on it)."""
        copy_store(source.root, self.store)


def _size(images: dict[str, tuple[str, Path]], refs: set[str]) -> int:
    """The size of the archives of these images."""
    return sum(tar.stat().st_size for ref, tar in images.values() if ref in refs)


def _same_file_system(store: Path, other: Path) -> bool:
    """Whether hard links can join the two (the nearest directory that exists stands for each)."""
    while not other.exists():
        other = other.parent
    while not store.exists():
        store = store.parent
    return os.stat(store).st_dev == os.stat(other).st_dev
