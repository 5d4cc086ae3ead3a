"""The cluster's cgroups: one root per cluster in every cgroup v1 hierarchy (this machine runs
cgroup v1, no systemd), and under it one per node, each node's kubelet's cgroup root, under which
it puts its pods; stop finds the pods' processes there and removes the whole tree, and a node's
crash ends the processes of its own subtree."""

from __future__ import annotations

import time
from pathlib import Path

from .processes import ClusterError, start_time


def cgroup_mounts() -> list[Path]:
    """Mount points of every cgroup v1 hierarchy."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype == "cgroup":
            mounts.append(Path(fields[4]))
    return mounts


class ClusterCgroups:
    def __init__(self, root: str):
        self.root = root  # e.g. /ddp-infra-<name>, the kubelet's cgroupRoot

    def node_root(self, node: str) -> str:
        """The cgroup root of a node's kubelet."""
        return f"{self.root}/{node}"

    def make(self, nodes: list[str]) -> None:
        """The cluster's root and each node's under it (cpuset's own values set at each level, as
        cgroup v1 wants before a process joins)."""
        for mount in cgroup_mounts():
            for relative in (self.root, *map(self.node_root, nodes)):
                path = mount / relative.lstrip("/")
                path.mkdir(exist_ok=True)
                if (mount / "cpuset.cpus").exists():
                    for key in ("cpuset.cpus", "cpuset.mems"):
                        (path / key).write_text((mount / key).read_text())

    def _dirs(self, node: str | None = None) -> list[Path]:
        """Every cgroup of the cluster (or of one node), deepest first."""
        dirs = []
        for mount in cgroup_mounts():
            root = mount / (self.node_root(node) if node else self.root).lstrip("/")
            if root.is_dir():
                dirs.extend(sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True))
                dirs.append(root)
        return dirs

    def processes(self, node: str | None = None) -> list[tuple[int, str]]:
        """Every process in the cluster's cgroups (or in one node's)."""
        found = set()
        for directory in self._dirs(node):
            try:
                pids = (directory / "cgroup.procs").read_text().split()
            except OSError:
                continue
            for pid in map(int, pids):
                st = start_time(pid)
                if st:
                    found.add((pid, st))
        return sorted(found)

    def remove(self) -> None:
        deadline = time.monotonic() + 15
        while True:
            left = []
            for directory in self._dirs():
                try:
                    directory.rmdir()
                except OSError:
                    left.append(directory)
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if left:
            raise ClusterError(f"cgroups still in use after stop: {', '.join(map(str, left[:5]))}")
