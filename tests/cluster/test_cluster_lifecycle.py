"""The local cluster itself: one Kubernetes version throughout, its own network namespace, images
imported once for all the machine's clusters, and nothing left on the machine after it stops, also
after a crashed run, without touching another cluster that runs beside it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cluster_testing import host_state

from toolchain.cluster import CACHE, ClusterError, LocalCluster
from toolchain.cluster import image_seed, local_cluster
from toolchain.cluster.containerd import RECORD, Containerd
from toolchain.cluster.image_seed import WORTH_COPYING, ImageSeed
from toolchain.cluster.processes import alive

pytestmark = pytest.mark.timeout(600)
REPO = Path(__file__).resolve().parents[2]


def test_the_test_cluster_runs_one_kubernetes_version(cluster):
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    node = json.loads(cluster.kubectl("get", "node", cluster.node_name, "-o", "json").stdout)
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == version
    assert info["kubeProxyVersion"] in (version, "")  # 1.33 stopped filling this field in
    assert info["containerRuntimeVersion"].startswith("containerd://")
    # Routing inside the cluster's namespace: the node's own links only, everything else goes to
    # the veth whose peer is a port of the switch's bridge (in a namespace of its own), so no
    # packet can leave for another address.
    links = cluster.in_namespace("ip", "-o", "link").stdout
    names = {line.split(":")[1].strip().split("@")[0] for line in links.splitlines()}
    assert {"lo", "veth-node"} <= names
    # besides them only the pod bridge (made with the first pod) and the pods' veths
    assert all(name in ("lo", "cni0") or name.startswith("veth") for name in names), names
    route = cluster.in_namespace("ip", "route", "get", "192.0.2.1").stdout
    assert "dev veth-node" in route
    switch = subprocess.run(["nsenter", "-t", str(cluster.switch.holder), "-n", "--", "ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "port-0@" in switch and " master nodes " in switch, switch


def test_a_crashed_run_is_cleaned_up_and_stop_leaves_nothing():
    """A run of two nodes (two nodes' namespaces, kubelets and runtimes, and the switch) left running
    by a crash: the next start ends every process of it, and stop leaves nothing on the machine."""
    name = "lifecycle"
    before = host_state(name)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cluster = LocalCluster(name, with_images=False)
    try:  # stop() ends the crashed run's daemons too, whatever fails on the way
        # `up` returns and leaves its daemons running, as a test run killed mid-way would.
        subprocess.run([sys.executable, "-m", "toolchain.cluster", "up", "--name", name, "--without-images", "--nodes", "2"],
                       cwd=REPO, env=env, check=True, capture_output=True, timeout=300)
        pids_file = CACHE / "cluster" / name / "run" / "pids.json"
        crashed = {key: tuple(value) for key, value in json.loads(pids_file.read_text()).items()}
        assert all(alive(*p) for p in crashed.values())
        assert {"switch", f"kubelet-{name}-node-1", f"containerd-{name}-node-1", f"holder-{name}-node-1"} <= crashed.keys(), crashed

        cluster.start()
        assert not any(alive(*p) for p in crashed.values()), "a process of the crashed run survived the new start"
        assert cluster.kubectl("get", "node", cluster.node_name).returncode == 0
        running = {key: tuple(value) for key, value in json.loads(pids_file.read_text()).items()}
    finally:
        cluster.stop()
    assert not any(alive(*p) for p in running.values())
    assert not (CACHE / "cluster" / name / "run").exists()
    assert host_state(name) == before


def test_an_image_of_an_earlier_build_leaves_the_store_with_whatever_names_it():
    """A new build's start keeps only the images it imports: an old build's image goes with every
    ref to it (the tag the dev stack deploys, CRI's id ref) and its content, so the store of a
    cluster name does not grow by an image's size at each build."""
    cluster = LocalCluster("lifecycle", with_images=("pause",))
    try:
        cluster.start()
        pause = cluster.images["pause"]
        # an "earlier build": the same layers under another manifest, tagged as the dev stack's image
        stale_ref = "docker.io/library/ddp-trainer:dev"
        assert cluster.containerd.ctr("images", "convert", "--oci", pause, stale_ref).returncode == 0
        stale = cluster.containerd.digests()[stale_ref]
        assert stale != cluster.containerd.digests()[pause]

        cluster.containerd.import_images({"pause": (pause, Path("unused: present already"))})  # as the next start does
        digests = cluster.containerd.digests()
        assert stale_ref not in digests and stale not in digests.values()
        assert stale not in cluster.containerd.ctr("content", "ls", "-q").stdout.split(), "the old manifest's content was kept"
        assert pause in digests  # the current build's image stays, with its layers
        assert cluster.in_namespace("true").returncode == 0
    finally:
        cluster.stop()


def test_a_cluster_copies_the_images_another_imported_and_imports_none(monkeypatch, capsys):
    """The machine's image seed (image_seed.py): the first cluster to import an image gives the seed a
    copy of its store; the next one's store is a copy of the seed, its files hard links to the seed's,
    and it imports nothing. The seed here is the test's own, and takes even the pause image."""
    seed = ImageSeed(CACHE / "cluster" / "lifecycle-seed")
    monkeypatch.setattr(local_cluster, "IMAGE_SEED", seed)
    monkeypatch.setattr(image_seed, "WORTH_COPYING", 0)
    first, second = LocalCluster("lifecycle-seeding", with_images=("pause",)), LocalCluster("lifecycle-seeded", with_images=("pause",))
    homes = (first.home, second.home, seed.home)
    for home in homes:
        shutil.rmtree(home, ignore_errors=True)
    try:
        first.start()
        pause = first.images["pause"]
        assert f"[cluster] imported {pause} in " in capsys.readouterr().err
        first.stop()
        second.start()
        assert "[cluster] imported" not in capsys.readouterr().err
        assert pause in second.containerd.digests()
        blobs = "root/io.containerd.content.v1.content/blobs/sha256"
        copied = max((second.containerd.root / blobs).iterdir(), key=lambda blob: blob.stat().st_size)
        assert copied.stat().st_ino == (seed.store / blobs / copied.name).stat().st_ino, "the copy is not made of the seed's files"
        assert second.in_namespace("true").returncode == 0
    finally:
        first.stop()
        second.stop()
        for home in homes:
            shutil.rmtree(home, ignore_errors=True)


def test_the_seed_takes_what_is_worth_copying_and_gives_what_a_store_lacks(tmp_path):
    """The seed's choices, on stores made of files (no containerd): what an import added is worth a copy
    only past WORTH_COPYING; a store gets a copy where it lacks an image worth copying and the seed
    holds every image it wants; a copy links the images' files and copies the databases."""
    big, small = tmp_path / "big.tar", tmp_path / "small.tar"
    with open(big, "wb") as sparse:
        sparse.truncate(WORTH_COPYING)
    small.write_bytes(b"\0" * 1024)
    images = {"pause": ("pause:1", small), "trainer": ("trainer:1", big)}
    blob, database = "root/io.containerd.content.v1.content/blobs/sha256/layer", "root/io.containerd.metadata.v1.bolt/meta.db"

    def store(name: str, *refs: str) -> Containerd:
        found = Containerd(tmp_path / "run", tmp_path / name / "containerd")
        for path in (blob, database):
            (found.root / path).parent.mkdir(parents=True, exist_ok=True)
            (found.root / path).write_text(name)
        (found.root / RECORD).write_text(json.dumps(refs))
        return found

    seed, imported = ImageSeed(tmp_path / "seed"), store("imported", "pause:1", "trainer:1")
    assert not seed.worth_taking(imported, images, ["pause:1"]) and seed.worth_taking(imported, images, ["trainer:1"])
    seed.take(imported)
    lacking = store("lacking", "pause:1")
    assert seed.give(lacking, images) and lacking.recorded_images() == {"pause:1", "trainer:1"}
    assert (lacking.root / blob).stat().st_ino == (seed.store / blob).stat().st_ino == (imported.root / blob).stat().st_ino
    assert (lacking.root / database).stat().st_ino != (seed.store / database).stat().st_ino
    assert not seed.give(lacking, images)  # it holds them now
    assert not seed.give(store("small", "trainer:1"), images)  # it lacks only the pause image
    assert not seed.give(store("other", "pause:1"), {**images, "trainer": ("trainer:2", big)})  # the seed lacks trainer:2
    assert not list(tmp_path.glob("*/*.partial")), "a copy left its staging directory"
    # A store on a file system of its own (a disk of its own: here tmpfs) neither gives nor gets a copy.
    elsewhere = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        apart = Containerd(tmp_path / "run", elsewhere / "containerd")
        assert os.stat(elsewhere).st_dev != os.stat(tmp_path).st_dev
        assert not seed.give(apart, images) and not seed.worth_taking(apart, images, ["trainer:1"])
    finally:
        shutil.rmtree(elsewhere)


def test_a_cluster_that_stops_leaves_the_mounts_of_another_that_runs():
    """The mount points made on the machine (/var/lib/kubelet, /var/lib/cni) are shared by the
    clusters running side by side: removing one on the machine would unmount it in every
    namespace. The last cluster to stop removes them."""
    made = [path for path in ("/var/lib/kubelet", "/var/lib/cni") if not Path(path).exists()]
    first, second = LocalCluster("lifecycle", with_images=False), LocalCluster("lifecycle-beside", with_images=False)
    try:
        first.start()
        second.start()
        first.stop()
        for path in ("/var/lib/kubelet", "/var/lib/cni"):
            assert second.in_namespace("findmnt", "--noheadings", path).returncode == 0, f"{path} is no longer mounted in the running cluster"
        assert second.kubectl("get", "node", second.node_name).returncode == 0
    finally:
        first.stop()
        second.stop()
        shutil.rmtree(second.home, ignore_errors=True)  # its store: a name no other test uses
    assert not [path for path in made if Path(path).exists()], "the last cluster to stop left the mount points it made"


def test_a_cluster_shape_that_cannot_be_is_refused_before_anything_starts():
    with pytest.raises(ClusterError, match=r"nodes: got 0; allowed: 1 to 8"):
        LocalCluster("lifecycle", nodes=0)
    with pytest.raises(ClusterError, match=r"node_labels: no node 3 in a cluster of 3 \(indexes 0 to 2\)"):
        LocalCluster("lifecycle", nodes=3, node_labels={3: {"rack": "a"}})
    refused = subprocess.run([sys.executable, "-m", "toolchain.cluster", "up", "--name", "lifecycle", "--label", "rack=a"],
                             cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert refused.returncode == 2 and "INDEX:KEY=VALUE" in refused.stderr, refused.stderr
    assert not (CACHE / "cluster" / "lifecycle" / "run").exists()
