"""The local cluster's disk check: a store refuses what its disk cannot take, before importing anything.

With the disk nearly full, the kubelet reclaims images, the pause image among them, which nothing
can pull again without a registry: every new pod then fails. The check runs on the real filesystem
(a sparse archive stands for an image larger than any free space).
"""

from __future__ import annotations

import shutil

import pytest

from toolchain.cluster.containerd import HEADROOM, STORE_FACTOR, Containerd
from toolchain.cluster.processes import ClusterError


def test_an_image_the_disk_cannot_take_is_refused_with_the_sizes_and_what_to_do(tmp_path):
    archive = tmp_path / "huge.tar"
    free = shutil.disk_usage(tmp_path).free
    with open(archive, "wb") as sparse:
        sparse.truncate(int(free / STORE_FACTOR) + 1)  # only its stored form overflows the disk
    store = Containerd(tmp_path / "run", tmp_path / "cluster" / "demo" / "containerd")
    with pytest.raises(ClusterError) as refused:
        store.ensure_room({"localhost/ddp-infra/huge:1": archive})
    message = str(refused.value)
    assert "the cluster needs " in message and "localhost/ddp-infra/huge:1: " in message, message
    assert f"GiB is free. Make room: each cluster name keeps a store of its own under {tmp_path / 'cluster'}" in message
    assert list((tmp_path / "cluster" / "demo" / "containerd").iterdir()) == []  # nothing imported


def test_a_store_with_its_images_needs_room_for_its_pods_only(tmp_path):
    store = Containerd(tmp_path / "run", tmp_path / "containerd")
    if shutil.disk_usage(tmp_path).free < HEADROOM:
        pytest.fail("this machine's disk has less free space than one cluster's pods need")
    store.ensure_room({})  # everything present already: no image counted
    small = tmp_path / "small.tar"
    small.write_bytes(b"\0" * 1024)
    store.ensure_room({"localhost/ddp-infra/small:1": small})
