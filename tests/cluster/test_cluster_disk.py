"""The local cluster's disk: a store refuses what its disk cannot take, before importing anything;
and a disk that fills anyway costs no image and evicts no pod.

With the disk nearly full, a kubelet that garbage-collects images reclaims the pause image too,
which nothing can pull again without a registry: every new pod then fails. The check runs on the
real filesystem (a sparse archive stands for an image larger than any free space).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest
from waiting import wait_for

from toolchain.cluster import CACHE, LocalCluster
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


@pytest.mark.timeout(300)
def test_an_image_disk_left_almost_full_neither_loses_an_image_nor_puts_the_node_under_disk_pressure(tmp_path):
    """Nothing here can pull an image again, and disk pressure would evict the training pods and
    taint the node: the kubelet reclaims no image and reports no DiskPressure. The store is a file
    system of its own (ext4 on a sparse 5-GiB file: room for the cluster's disk check), holding the
    pause image, unused (no pod runs); a preallocated file then leaves it 0.005% free while the
    kubelet watches (its eviction manager looks every 10 s)."""
    name = "fullstore"
    home = CACHE / "cluster" / name
    store, disk = home / "containerd", tmp_path / "store.ext4"
    store.mkdir(parents=True, exist_ok=True)
    with open(disk, "wb") as sparse:
        sparse.truncate(5 * 2**30)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(disk)], check=True)
    subprocess.run(["mount", "-o", "loop", str(disk), str(store)], check=True)
    cluster = LocalCluster(name, with_images=())
    try:
        cluster.start()
        pause = cluster.images["pause"]
        assert pause in cluster.containerd.digests()
        summary = f"/api/v1/nodes/{cluster.node_name}/proxy/stats/summary"

        def image_fs() -> dict:
            return json.loads(cluster.kubectl("get", "--raw", summary).stdout)["node"]["runtime"]["imageFs"]

        # the kubelet counts this file system as the image disk
        assert abs(image_fs()["capacityBytes"] - shutil.disk_usage(store).total) < 2**20
        subprocess.run(["fallocate", "-l", str(shutil.disk_usage(store).free - 256 * 2**10), str(store / "filler")], check=True)
        seen = wait_for(lambda: (fs := image_fs())["availableBytes"] < fs["capacityBytes"] // 100 and fs, 60,
                        "the kubelet's stats to show the image disk under 1% free")  # fmt: skip
        # Three more looks of the eviction manager after the kubelet saw the disk full.
        time.sleep(3 * 10)
        assert pause in cluster.containerd.digests(), f"the kubelet reclaimed {pause} with the image disk at {seen}"
        conditions = json.loads(cluster.kubectl("get", "node", cluster.node_name, "-o", "json").stdout)["status"]["conditions"]
        assert {c["type"]: c["status"] for c in conditions}["DiskPressure"] == "False", conditions
    finally:
        cluster.stop()
        subprocess.run(["umount", str(store)], check=False)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(CACHE / "cluster" / f"{name}-failed-logs", ignore_errors=True)
