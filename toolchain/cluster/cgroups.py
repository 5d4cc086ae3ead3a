"""The cluster's cgroups: one root per cluster in every cgroup v1 hierarchy (this machine runs
cgroup v1, no systemd), under which the kubelet puts every pod; stop finds the pods' processes
there and removes the whole tree."""

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

    def make(self) -> None:
        for mount in cgroup_mounts():
            path = mount / self.root.lstrip("/")
            path.mkdir(exist_ok=True)
            if (mount / "cpuset.cpus").exists():
                for key in ("cpuset.cpus", "cpuset.mems"):
                    (path / key).write_text((mount / key).read_text())

    def _dirs(self) -> list[Path]:
        """Every cgroup of the cluster, deepest first."""
        dirs = []
        for mount in cgroup_mounts():
            root = mount / self.root.lstrip("/")
            if root.is_dir():
                dirs.extend(sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True))
                dirs.append(root)
        return dirs

    def processes(self) -> list[tuple[int, str]]:
        found = set()
        for directory in self._dirs():
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
