"""What the parts of a starting cluster (control_plane, node, addons) may use of it: the interface
LocalCluster gives them, so that they depend on it and not on LocalCluster."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Protocol

from .containerd import Containerd
from .namespaces import NodeNamespace
from .processes import Daemons


class RunningCluster(Protocol):
    name: str
    domain: str
    node_name: str
    context: str
    cgroup_root: str
    run_dir: Path
    addons: tuple[str, ...]
    workload_api: bool
    daemons: Daemons
    containerd: Containerd
    node: NodeNamespace

    def spawn(self, key: str, argv: list[str]) -> None: ...

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess: ...

    def probe_ok(self, url: str) -> bool: ...
