"""A node of the cluster as data: where its files are, its address and subnet, its share of the
machine, and its parts once started (node.py starts them)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .containerd import Containerd
from .namespaces import NodeNamespace
from .network import node_ip, pod_cidr


@dataclass
class ClusterNode:
    """One node: its name, address, pods' subnet, the share of the machine it advertises, and its
    parts once started. Node 0 lives in the control plane's namespaces and keeps the cluster's
    paths of a single-node cluster; node i's live under `<run>/nodes/<name>`."""

    index: int
    name: str
    run_dir: Path  # the node's own files: its containerd's config and socket, kubelet's config
    store: Path  # its containerd's root (its image store)
    cgroup_root: str
    share: int  # the machine is shared by this many nodes: each advertises 1/share of its CPU and memory
    labels: dict[str, str] = field(default_factory=dict)
    namespace: NodeNamespace | None = None
    containerd: Containerd | None = None

    @property
    def ip(self) -> str:
        return node_ip(self.index)

    @property
    def pod_cidr(self) -> str:
        return pod_cidr(self.index)

    def key(self, daemon: str) -> str:
        """The daemon's name in the cluster's process record (node 0's keep their single-node names)."""
        return daemon if self.index == 0 else f"{daemon}-{self.name}"

    def reserved(self) -> dict[str, str]:
        """What the kubelet holds back so that the node advertises its share of the machine."""
        if self.share == 1:
            return {}
        cpu_millis = len(os.sched_getaffinity(0)) * 1000
        memory_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
        return {"cpu": f"{cpu_millis - cpu_millis // self.share}m", "memory": f"{memory_mib - memory_mib // self.share}Mi"}
