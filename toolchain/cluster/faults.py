"""What happens to a node that fails, made to happen: a crash (every daemon and container of the
node killed at once and its network cut, as a kernel panic or a lost host leaves it), and the boot
that brings it back. A partition alone is a port of the switch set down (LocalCluster.cut_node)."""

from __future__ import annotations

import os
import signal

from . import node as nodes
from .namespaces import processes_in
from .cluster_node import ClusterNode
from .processes import ClusterError, kill_all
from .running import RunningCluster

# A node's own daemons, in the order a crash kills them (the kubelet first: it restarts nothing).
NODE_DAEMONS = ("kubelet", "kube-proxy", "kube-router", "containerd")


def crash(cluster: RunningCluster, node: ClusterNode) -> None:
    """The node stops answering at once: its network cut, then its daemons, its containers (its
    cgroups) and containerd's shims (its namespace) killed. Its Node object and pods stay in the
    API as they were, as with a real host that died: only the control plane's timeouts change them."""
    if node.index == 0:
        raise ClusterError(f"{node.name} holds the control plane: crash another node")
    cluster.switch.set_port(node.index, up=False)
    cluster.daemons.end([node.key(daemon) for daemon in NODE_DAEMONS], sig=signal.SIGKILL, grace=0)
    netns = os.readlink(f"/proc/{node.namespace.holder}/ns/net")
    holder = cluster.daemons.pids[node.key("holder")]
    left = kill_all(lambda: cluster.cgroups.processes(node.name) + processes_in(netns, exclude={holder}))
    if left:
        raise ClusterError(f"processes of {node.name} outlived its crash: {left}")


def restart(cluster: RunningCluster, node: ClusterNode, binaries: dict[str, str], deadline: float) -> None:
    """The node boots again: its network back, containerd on the store it had (a crashed run's
    containers removed), then its kubelet, kube-proxy and policy controller; returns once Ready."""
    cluster.switch.set_port(node.index, up=True)
    node.containerd.start(cluster.daemons, node.namespace, node.pod_cidr, cluster.images.get("pause", ""), deadline)
    nodes.start_node(cluster, node, binaries)
    cluster.daemons.wait(lambda: nodes.node_ready(cluster, node), deadline, f"node {node.name} Ready again")
    nodes.start_network_policy(cluster, node, binaries)
    cluster.daemons.wait(lambda: nodes.policy_ready(cluster, node), deadline, f"kube-router's network policy controller on {node.name}")
