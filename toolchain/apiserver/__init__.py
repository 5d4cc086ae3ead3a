"""The test API server (server.py: etcd and kube-apiserver alone, on loopback), and what it shares
with the local cluster (toolchain/cluster/): the control plane's command lines and readiness
(control_plane.py) and its certificates (certificates.py)."""

from .server import LocalApiServer, PortTaken, find_tool, free_port, free_ports, tool_dir

__all__ = ["LocalApiServer", "PortTaken", "find_tool", "free_port", "free_ports", "tool_dir"]
