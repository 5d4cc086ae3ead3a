"""A node's container runtime: containerd inside the node's namespaces with the CNI bridge on the
node's own pod subnet, and the images imported into its store (there is no registry to pull
from). Node 0's store, `<cache>/cluster/<name>/containerd`, outlives the run, so an image is
imported once (or copied from the machine's image seed: image_seed.py); each other node's store
is a copy of it made of hard links (copy_store), so the nodes share the images' files on disk."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .namespaces import NodeNamespace
from .processes import ClusterError, Daemons


# A store holds an imported image twice, its blobs and its unpacked snapshot: a 2.63-GiB trainer
# archive made a 5.24-GiB store, a 5.60-GiB one 11.19 GiB (bench/bench_image_store.py). Beyond the
# images, the pods' writable layers, logs and local volumes need room: the kubelet neither reclaims
# images nor evicts pods when the disk fills (node.py), so a full disk fails the pods' writes.
STORE_FACTOR = 2.25
HEADROOM = 4 * 2**30
# In a store: the refs of the images its last import_images left there.
RECORD = "images.json"


class Containerd:
    def __init__(self, run_dir: Path, root: Path, key: str = "containerd"):
        self.run_dir, self.root, self.key = run_dir, root, key

    @property
    def socket(self) -> str:
        return str(self.run_dir / "containerd.sock")

    def start(self, daemons: Daemons, node: NodeNamespace, pod_cidr: str, pause_ref: str, deadline: float) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        cni_conf = self.run_dir / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-ddp-infra.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0",
            "name": "ddp-infra",
            "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }, indent=2))  # fmt: skip
        config = f"""version = 2
root = "{self.root}/root"
state = "/run/containerd"
[grpc]
  address = "{self.socket}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.root}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_ref}"
  # Processes here lack CAP_SYS_RESOURCE: without this, runc fails writing oom_score_adj.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni_conf}"
"""
        (self.run_dir / "containerd.toml").write_text(config)
        daemons.popen(self.key, node.entered("containerd", "--config", str(self.run_dir / "containerd.toml")))
        daemons.wait(lambda: self.ctr("version").returncode == 0, deadline, "containerd")
        # Containers of a crashed earlier run: their tasks died with their shims.
        for container in self.ctr("containers", "ls", "-q").stdout.split():
            self.ctr("tasks", "rm", "-f", container)
            self.ctr("containers", "rm", container)

    def ctr(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(["ctr", "--address", self.socket, "-n", "k8s.io", *args],
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip

    def import_images(self, images: dict[str, tuple[str, Path]]) -> list[str]:
        """Imports the images the store lacks, removes those of other builds, and records what it
        holds. Returns the refs it imported."""
        present = set(self.ctr("images", "ls", "-q").stdout.split())
        self.ensure_room({ref: tar for ref, tar in images.values() if ref not in present})
        imported = []
        for ref, tar in images.values():
            if ref in present:
                continue
            began = time.monotonic()
            self.load(tar)
            print(f"[cluster] imported {ref} in {time.monotonic() - began:.0f} s", file=sys.stderr)
            imported.append(ref)
        wanted = sorted(ref for ref, _ in images.values())
        self.prune(set(wanted))
        staged = self.root / f"{RECORD}.partial"
        staged.write_text(json.dumps(wanted))
        os.replace(staged, self.root / RECORD)  # a new file: a copy of this store made of hard links keeps its own
        return imported

    def recorded_images(self) -> set[str]:
        """The refs the store's last import_images left there (none where it never ran)."""
        return recorded_images(self.root)

    def ensure_room(self, imports: dict[str, Path]) -> None:
        """Refuses, before anything is imported, a store whose disk cannot take the images and the pods."""
        self.root.mkdir(parents=True, exist_ok=True)
        images = sum(tar.stat().st_size for tar in imports.values()) * STORE_FACTOR
        needed, free = images + HEADROOM, shutil.disk_usage(self.root).free
        if free < needed:
            what = f"{', '.join(imports)}: {_gb(images)} in the store, and " if imports else ""
            raise ClusterError(
                f"the cluster needs {_gb(needed)} free on the disk of {self.root} ({what}{_gb(HEADROOM)} for its pods), "
                f"and {_gb(free)} is free. Make room: each cluster name keeps a store of its own under "
                f"{self.root.parent.parent}; remove those of clusters you no longer use (`python -m toolchain.cluster down "
                f"--name NAME`, then remove {self.root.parent.parent}/NAME)."
            )

    def digests(self) -> dict[str, str]:
        """{ref: manifest digest} of every image in the store (CRI's sha256:<id> refs too)."""
        rows = self.ctr("images", "ls").stdout.splitlines()[1:]
        return {row.split()[0]: row.split()[2] for row in rows if row.strip()}

    def prune(self, wanted: set[str]) -> None:
        """Keeps only the images of the current build, whatever else names an old one (a tag such as
        ddp-trainer:dev, CRI's id ref): each old build is gigabytes. --sync: collected before it
        returns, not left for a collector that a stopped cluster never runs."""
        digests = self.digests()
        keep = {digests[ref] for ref in wanted if ref in digests}
        stale = [ref for ref, digest in digests.items() if digest not in keep]
        if stale:
            self.ctr("images", "rm", "--sync", *stale, timeout=600)

    def load(self, tar: Path) -> None:
        """Imports an image archive. One built after the cluster started (`make image`) is left out of
        the store's record, so the next start prunes it as any image of another build."""
        result = self.ctr("images", "import", str(tar), timeout=1800)
        if result.returncode != 0:
            raise ClusterError(f"ctr images import {tar} failed:\n{result.stderr}")

    def tag(self, source: str, target: str) -> None:
        result = self.ctr("images", "tag", "--force", source, target)
        if result.returncode != 0:
            raise ClusterError(f"ctr images tag {source} {target} failed:\n{result.stderr}")


def image_reference(name: str) -> str:
    """The reference the kubelet resolves a pod's `image:` to, as Docker's names normalize:
    `my-task:dev` is docker.io/library/my-task:dev, `team/x` docker.io/team/x:latest."""
    first, slash, rest = name.partition("/")
    if not slash:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last or "@" in last else f"{name}:latest"


def recorded_images(store: Path) -> set[str]:
    record = store / RECORD
    return set(json.loads(record.read_text())) if record.exists() else set()


def copy_store(source: Path, target: Path) -> None:
    """`target` made a copy of the store `source` (no containerd running on either) out of hard
    links: the images' blobs and unpacked layers are never written again, so both stores share
    them on disk; the databases, which containerd writes in place, are copied. Built beside
    `target` and renamed into place, so an interrupted copy is never taken for a store."""
    staged = target.with_name(f"{target.name}.partial")
    shutil.rmtree(staged, ignore_errors=True)
    staged.parent.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["cp", "-a", "--link", str(source), str(staged)], capture_output=True, text=True)
    if result.returncode != 0:
        raise ClusterError(f"copying the image store {source} failed:\n{result.stderr}")
    # root/io.containerd.metadata.v1.bolt/meta.db, root/io.containerd.snapshotter.v1.overlayfs/metadata.db
    for database in staged.glob("root/*/*.db"):
        copied = database.with_suffix(".db.copy")
        shutil.copy2(database, copied)
        os.replace(copied, database)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staged, target)


def _gb(size: float) -> str:
    return f"{size / 2**30:.1f} GiB"
