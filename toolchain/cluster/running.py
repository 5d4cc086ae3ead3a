"""What the parts of a starting cluster (control_plane, node, addons) may use of it: the interface
LocalCluster gives them, so that they depend on it and not on LocalCluster."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .namespaces import NodeNamespace
from .processes import Daemons

if TYPE_CHECKING:
    from .cgroups import ClusterCgroups
    from .namespaces import Switch
    from .cluster_node import ClusterNode


class RunningCluster(Protocol):
    name: str
    domain: str
    node_name: str
    context: str
    run_dir: Path
    addons: tuple[str, ...]
    workload_api: bool
    daemons: Daemons
    node: NodeNamespace
    nodes: list["ClusterNode"]
    switch: "Switch"
    cgroups: "ClusterCgroups"
    images: dict[str, str]

    def spawn(self, key: str, argv: list[str]) -> None: ...

    def spawn_on(self, node: "ClusterNode", daemon: str, argv: list[str]) -> None: ...

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess: ...

    def probe_ok(self, url: str, node: "ClusterNode | None" = None) -> bool: ...
