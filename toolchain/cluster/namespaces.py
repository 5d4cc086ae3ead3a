"""The nodes' isolation: each node in a network and mount namespace of its own, held open by one
`unshare` process that every daemon of the node is entered into (`nsenter`); the switch, a
namespace holding the bridge that joins the nodes' network; and the relay that is the only thing
the cluster has listening in the machine's own network namespace.

Inside a node's namespace, its address sits on one end of a veth pair whose other end is a port
of the switch's bridge, with the default route pointing at an address nothing answers: no packet
can leave for any address outside this machine, and nothing changes on the machine's own network
(routes, bridges, iptables). A port set down cuts its node off, as a pulled cable would.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from .network import GATEWAY_IP, NODE_NETWORK_PREFIX, node_ip, pod_cidr
from .processes import ClusterError, Daemons, start_time

CLONE_NEWNET = 0x40000000


class NodeNamespace:
    """The namespaces of one node, entered through the process that holds them."""

    def __init__(self, holder: int, mount_points: "MountPoints"):
        self.holder = holder
        self.mount_points = mount_points

    @classmethod
    def start(cls, daemons: Daemons, key: str, node_dir: Path, mount_points: "MountPoints") -> "NodeNamespace":
        """A node's namespaces, with /run, /var/log, /var/lib/kubelet and /var/lib/cni of its own
        under `node_dir`; its network has only its loopback until the switch attaches it."""
        # Mount events from the machine still reach the namespace (slave), none go back.
        proc = daemons.popen(key, ["unshare", "--net", "--mount", "--propagation", "slave", "--", "sleep", "infinity"])
        node = cls(_entered_namespace(daemons, key, proc), mount_points)
        kubelet_dir, cni_dir, log_dir = (node_dir / d for d in ("kubelet", "cni-state", "var-log"))
        for d in (kubelet_dir, cni_dir, log_dir):
            d.mkdir(parents=True)
        node.script(f"""
            set -eu
            ip link set lo up
            sysctl -qw net.ipv4.ip_forward=1
            sysctl -qw net.bridge.bridge-nf-call-iptables=1 || true
            # /run inside the namespace is its own: network namespaces, containerd's shim
            # sockets and iptables' lock never touch the machine's /run.
            mount -t tmpfs -o mode=0755 tmpfs /run
            mkdir -p /run/netns /run/containerd
            # The kubelet writes /var/lib/kubelet whatever its --root-dir says, libcni writes
            # /var/lib/cni, the kubelet and the runtime write /var/log/pods: all into the node's dir.
            mount --bind {log_dir} /var/log
        """)
        # /var/lib/kubelet and /var/lib/cni must exist as mount points (a tmpfs over /var/lib would
        # hide the machine's package state from the daemons).
        for target, source in (("/var/lib/kubelet", kubelet_dir), ("/var/lib/cni", cni_dir)):
            node.bind_mount(source, target)
        return node

    def entered(self, *argv: str) -> list[str]:
        """argv run inside the namespaces; nsenter execs it, so its pid is argv's."""
        return ["nsenter", "-t", str(self.holder), "-m", "-n", "--", *argv]

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(self.entered(*argv), capture_output=True, text=True, timeout=timeout)

    def script(self, script: str) -> None:
        proc = self.run("sh", "-c", script)
        if proc.returncode != 0:
            raise ClusterError(f"setting up the cluster's namespace failed:\n{script}\n{proc.stderr}")

    def bind_mount(self, source: Path, target: str) -> None:
        """`source` at `target` inside the namespace, on a mount point made on the machine if missing."""
        self.mount_points.make(target)
        self.script(f"mount --bind {source} {target}")


def _entered_namespace(daemons: Daemons, key: str, proc: subprocess.Popen) -> int:
    """The pid of an `unshare` once it is in its new network namespace."""
    deadline = time.monotonic() + 10
    while proc.poll() is not None or os.readlink(f"/proc/{proc.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
        if proc.returncode is not None:
            raise ClusterError(f"unshare exited with {proc.returncode}: {daemons.tail(key)}")
        if time.monotonic() > deadline:
            raise ClusterError("unshare did not enter a new network namespace")
        time.sleep(0.05)
    return proc.pid


class Switch:
    """The nodes' network: a bridge in a network namespace of its own, one port per node. It has no
    address and no route, so it forwards between the nodes and nowhere else."""

    BRIDGE = "nodes"

    def __init__(self, holder: int):
        self.holder = holder

    @classmethod
    def start(cls, daemons: Daemons) -> "Switch":
        proc = daemons.popen("switch", ["unshare", "--net", "--", "sleep", "infinity"])
        switch = cls(_entered_namespace(daemons, "switch", proc))
        switch.script(f"ip link set lo up; ip link add {cls.BRIDGE} type bridge; ip link set {cls.BRIDGE} up")
        return switch

    def script(self, script: str) -> None:
        proc = subprocess.run(["nsenter", "-t", str(self.holder), "-n", "--", "sh", "-c", f"set -eu; {script}"],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        if proc.returncode != 0:
            raise ClusterError(f"setting up the nodes' switch failed:\n{script}\n{proc.stderr}")

    @staticmethod
    def port(index: int) -> str:
        return f"port-{index}"

    def attach(self, node: NodeNamespace, index: int, node_count: int) -> None:
        """Node `index` on the switch: its address on veth-node, its peer a port of the bridge, a
        route to each other node's pods through that node, and a default route that leads nowhere."""
        routes = "\n".join(f"ip route add {pod_cidr(other)} via {node_ip(other)} dev veth-node"
                           for other in range(node_count) if other != index)  # fmt: skip
        port = self.port(index)
        node.script(f"""
            set -eu
            ip link add veth-node type veth peer name {port}
            ip link set {port} netns {self.holder}
            ip addr add {node_ip(index)}/{NODE_NETWORK_PREFIX} dev veth-node
            ip link set veth-node up
            ip route add default via {GATEWAY_IP} dev veth-node onlink
            {routes}
        """)
        self.script(f"ip link set {port} master {self.BRIDGE}; ip link set {port} up")

    def set_port(self, index: int, up: bool) -> None:
        """Connects node `index` to the others, or cuts it off (a partition, a dead NIC)."""
        self.script(f"ip link set {self.port(index)} {'up' if up else 'down'}")


class MountPoints:
    """The directories made on the machine as the clusters' mount points (/var/lib/kubelet, ...),
    recorded in one file for every cluster of the machine. Removing such a directory on the machine
    unmounts it in every namespace, so only the last cluster to stop removes them."""

    def __init__(self, record: Path):
        self.record = record

    def make(self, target: str) -> None:
        with self._locked() as made:
            for directory in reversed([path for path in (Path(target), *Path(target).parents) if not path.exists()]):
                directory.mkdir()
                made.append(str(directory))

    def remove(self, another_running: Callable[[], bool]) -> None:
        """Removes what was made, deepest first, unless another cluster runs. Asked under the lock:
        a cluster's holder runs before it makes or mounts anything, so one that starts meanwhile is seen."""
        with self._locked() as made:
            if another_running():
                return
            for directory in reversed(made):
                try:
                    Path(directory).rmdir()
                except FileNotFoundError:
                    pass
            made.clear()

    @contextmanager
    def _locked(self) -> Iterator[list[str]]:
        self.record.parent.mkdir(parents=True, exist_ok=True)
        with open(self.record.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            made = json.loads(self.record.read_text()) if self.record.exists() else []
            yield made
            if made:
                self.record.write_text(json.dumps(made))
            else:
                self.record.unlink(missing_ok=True)


def processes_in(netns: str, exclude: set[tuple[int, str]] = frozenset()) -> list[tuple[int, str]]:
    """Every process in the network namespace `netns` (containerd's shims among them) but `exclude`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if os.readlink(f"/proc/{pid}/ns/net") != netns:
                continue
        except OSError:
            continue
        st = start_time(pid)
        if st and (pid, st) not in exclude:
            found.append((pid, st))
    return found


def relay(listen_port: int, netns_pid: int, target_port: int) -> None:
    """Accepts on 127.0.0.1:listen_port in this namespace, connects to 127.0.0.1:target_port in
    the namespace of netns_pid. The listening socket is made first; the process then moves into
    the cluster's namespace, where every connection it opens lives."""
    listener = socket.create_server(("127.0.0.1", listen_port), reuse_port=False)
    libc = ctypes.CDLL(None, use_errno=True)
    with open(f"/proc/{netns_pid}/ns/net") as ns:
        if libc.setns(ns.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    while True:
        client, _ = listener.accept()
        try:
            upstream = socket.create_connection(("127.0.0.1", target_port), timeout=10)
            upstream.settimeout(None)
        except OSError:
            client.close()
            continue
        threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
