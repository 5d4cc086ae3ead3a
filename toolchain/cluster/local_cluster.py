"""LocalCluster: one cluster's start, stop and status, and the helpers tests use on it. What each
part is and does lives in the module named for it (see the package's docstring); what happens to
a node that fails, in faults.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable

from toolchain.apiserver import certificates
from toolchain.apiserver import control_plane as api
from toolchain.apiserver import find_tool, free_port, tool_dir

from . import control_plane, credentials, faults, node
from .addons import ADDONS, start_addon
from .cgroups import ClusterCgroups
from .containerd import Containerd, copy_store
from .image_seed import ImageSeed
from .namespaces import MountPoints, NodeNamespace, Switch, processes_in
from .network import API_PORT, MAX_NODES
from .cluster_node import ClusterNode
from .processes import ClusterError, Daemons, alive, kill_all, send, wait_gone

HERE = Path(__file__).resolve().parent.parent  # toolchain/
CACHE = Path(os.environ.get("DDP_INFRA_CACHE", Path.home() / ".cache" / "ddp-infra"))
SHAPE = "shape.json"  # in the run: how many nodes it has, for a later process that reopens it
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "coredns", "kube-router")


PRODUCT_IMAGES = ("pause", "trainer")
# The images every cluster of this machine copies rather than imports again (image_seed.py).
IMAGE_SEED = ImageSeed(CACHE / "cluster" / ".image-seed")


def image_archives() -> dict[str, tuple[str, Path]]:
    """{name: (image ref, docker-archive tar)} of the images toolchain/images.sh builds."""
    out = subprocess.run([str(HERE / "images.sh"), "--print"], capture_output=True, text=True, check=True)
    images = {}
    for line in out.stdout.splitlines():
        name, ref, tar = line.split()
        images[name] = (ref, Path(tar))
    return images


class LocalCluster:
    """A cluster of one control plane and `nodes` nodes; a context manager. See the package's docstring.

    Attributes once started: kubeconfig (for kubectl and Pulumi on this machine, context
    `ddp-infra-<name>`), node_name (node 0's), nodes, images ({name: ref}), startup_seconds, run_dir.
    `node_labels`: {node index: {label: value}}, set on the nodes once they are registered (a
    topology's zone, block, rack).
    """

    def __init__(self, name: str = "ddp-infra", *, bin_dir: Path | None = None, startup_timeout: float = 240.0,
                 with_images: bool | Iterable[str] = True, domain: str = "cluster.local", addons: Iterable[str] = (),
                 workload_api: bool = False, nodes: int = 1, node_labels: dict[int, dict[str, str]] | None = None):
        if not 1 <= nodes <= MAX_NODES:
            raise ClusterError(f"nodes: got {nodes}; allowed: 1 to {MAX_NODES}")
        unlabelled = sorted(set(node_labels or {}) - set(range(nodes)))
        if unlabelled:
            raise ClusterError(f"node_labels: no node {unlabelled[0]} in a cluster of {nodes} (indexes 0 to {nodes - 1})")
        self.name = name
        self.addons = tuple(addons)
        # The Workload API (beta, off by default) and its gang scheduling (control_plane.WORKLOAD_API_FLAGS):
        # with them, the Job controller makes the PodGroup of a Job that names a Workload's template.
        self.workload_api = workload_api
        unknown = sorted(set(self.addons) - set(ADDONS))
        if unknown:
            raise ClusterError(f"unknown add-on(s) {', '.join(unknown)}; known: {', '.join(ADDONS)}")
        self.domain = domain  # the cluster domain: CoreDNS's zone, the kubelet's clusterDomain
        self.home = CACHE / "cluster" / name
        self.run_dir = self.home / "run"
        self.bin_dir = bin_dir or tool_dir()
        self.startup_timeout = startup_timeout
        # True: the product's images (pause, trainer); or the names of those to import among all that
        # images.sh builds (pause is always one; shapes is the example project's, for its journey).
        self.with_images = with_images
        self.node_name = f"{name}-node"
        self.cgroup_root = f"/ddp-infra-{name}"
        self.context = f"ddp-infra-{name}"
        self.kubeconfig = str(self.home / "kubeconfig")
        self.images: dict[str, str] = {}
        self.server: str | None = None  # the API server's URL on this machine (the relay)
        self.startup_seconds: float | None = None
        self.daemons = Daemons(self.run_dir)
        self.cgroups = ClusterCgroups(self.cgroup_root)
        self.nodes = [self._node(index, nodes, (node_labels or {}).get(index, {})) for index in range(nodes)]
        self.containerd = self.nodes[0].containerd  # node 0's: where images are imported
        self.node: NodeNamespace | None = None  # node 0's namespaces, the control plane's too
        self.switch: Switch | None = None
        self._mount_points = MountPoints(CACHE / "cluster" / "made-dirs.json")  # shared by every cluster
        self._tokens: dict[str, str] = {}
        self._binaries: dict[str, str] = {}

    @classmethod
    def existing(cls, name: str) -> "LocalCluster":
        """The cluster `name` with the nodes it was started with (one if it never was)."""
        shape = CACHE / "cluster" / name / "run" / SHAPE
        return cls(name, nodes=json.loads(shape.read_text())["nodes"] if shape.exists() else 1)

    def _node(self, index: int, count: int, labels: dict[str, str]) -> ClusterNode:
        if index == 0:
            name, run_dir, store = self.node_name, self.run_dir, self.home / "containerd"
        else:
            name = f"{self.node_name}-{index}"
            run_dir, store = self.run_dir / "nodes" / name, self.home / "nodes" / name / "containerd"
        found = ClusterNode(index, name, run_dir, store, self.cgroups.node_root(name), share=count, labels=dict(labels))
        found.containerd = Containerd(run_dir, store, key=found.key("containerd"))
        return found

    def node_named(self, name: str) -> ClusterNode:
        found = next((node for node in self.nodes if node.name == name), None)
        if found is None:
            raise ClusterError(f"no node {name} in cluster {self.name} (nodes: {', '.join(n.name for n in self.nodes)})")
        return found

    # --- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> "LocalCluster":
        began = time.monotonic()
        self.stop()  # whatever a crashed earlier run left
        binaries = {c: find_tool(c, self.bin_dir) for c in (*COMPONENTS, *(ADDONS[a].manager for a in self.addons))}
        self._binaries = binaries
        images = self._wanted_images()
        for ref, tar in images.values():
            if not tar.is_file():
                raise ClusterError(f"image {ref} is not built ({tar} missing): run `make setup` (toolchain/images.sh)")
        self.run_dir.mkdir(parents=True)
        (self.run_dir / SHAPE).write_text(json.dumps({"nodes": len(self.nodes)}))
        self.daemons = Daemons(self.run_dir)
        self.daemons.logs.mkdir()
        try:
            self._start_nodes_namespaces()
            self._tokens = credentials.write_credentials(
                self.run_dir / "pki", name=self.name, nodes={node.key("kubelet"): node.name for node in self.nodes},
                domain=self.domain, context=self.context, addon_users={name: ADDONS[name].user for name in self.addons},
            )  # fmt: skip
            self.cgroups.make([node.name for node in self.nodes])
            self._start_runtimes(images)
            # A first import takes minutes on a busy machine and is bounded on its own: the
            # cluster's startup time counts from here.
            deadline = time.monotonic() + self.startup_timeout
            control_plane.start_etcd_and_apiserver(self, binaries)
            self._start_relay()
            self.daemons.wait(lambda: api.ready(self.server, self.run_dir / "pki" / "ca.crt", self._tokens["admin"]),
                              deadline, "kube-apiserver /readyz")  # fmt: skip
            control_plane.bootstrap_objects(self)
            control_plane.start_controllers(self, binaries)
            node.start_dns(self, binaries)
            for each in self.nodes:
                node.start_node(self, each, binaries)
            for each in self.nodes:
                self.daemons.wait(lambda: node.node_ready(self, each), deadline, f"node {each.name} Ready")
                self._label(each)
                node.start_network_policy(self, each, binaries)
            self.daemons.wait(lambda: node.dns_ready(self), deadline, "CoreDNS ready")
            for each in self.nodes:
                self.daemons.wait(lambda: node.policy_ready(self, each), deadline, f"kube-router's network policy controller on {each.name}")
            self.daemons.wait(self._default_service_account, deadline, "the default ServiceAccount (controllers running)")
            for addon in ADDONS.values():
                if addon.name in self.addons:
                    start_addon(self, addon, binaries[addon.manager], deadline)
        except BaseException:
            self.daemons.keep_logs(CACHE / "cluster" / f"{self.name}-failed-logs")
            self.stop()
            raise
        self.images = {name: ref for name, (ref, _) in images.items()}
        self.startup_seconds = time.monotonic() - began
        return self

    def _start_nodes_namespaces(self) -> None:
        """The switch, then each node's namespaces on it (node 0's hold the control plane too)."""
        self.switch = Switch.start(self.daemons)
        for each in self.nodes:
            each.namespace = NodeNamespace.start(self.daemons, each.key("holder"), each.run_dir, self._mount_points)
            self.switch.attach(each.namespace, each.index, len(self.nodes))
        self.node = self.nodes[0].namespace

    def _start_runtimes(self, images: dict[str, tuple[str, Path]]) -> None:
        """Each node's containerd. The images go into node 0's store, copied from the machine's image
        seed or imported (and then given to the seed); the other nodes' stores are copies of it made of
        hard links. A store is copied only while no containerd runs on it."""
        pause = images.get("pause", ("", None))[0]
        first = self.nodes[0]
        with IMAGE_SEED.held(images):
            IMAGE_SEED.give(first.containerd, images)
            first.containerd.start(self.daemons, first.namespace, first.pod_cidr, pause, time.monotonic() + 60)
            taken = IMAGE_SEED.worth_taking(first.containerd, images, first.containerd.import_images(images))
            if taken:
                self.daemons.end([first.key("containerd")])
                IMAGE_SEED.take(first.containerd)
        if len(self.nodes) == 1:
            if taken:
                first.containerd.start(self.daemons, first.namespace, first.pod_cidr, pause, time.monotonic() + 60)
            return
        self.daemons.end([first.key("containerd")])
        for each in self.nodes:
            if each.index:
                copy_store(first.store, each.store)
            each.containerd.start(self.daemons, each.namespace, each.pod_cidr, pause, time.monotonic() + 60)

    def _wanted_images(self) -> dict[str, tuple[str, Path]]:
        if self.with_images is False:
            return {}
        built = image_archives()
        if self.with_images is True:
            return {name: built[name] for name in PRODUCT_IMAGES}
        return {name: built[name] for name in {"pause", *self.with_images}}

    def stop(self) -> None:
        """Ends every process of this cluster (also a crashed earlier run's) and removes its state."""
        recorded = self.daemons.recorded()
        holders = {key: pid for key, pid in recorded.items() if _is_holder(key) and alive(*pid)}
        netns = {os.readlink(f"/proc/{pid}/ns/net") for pid, _ in holders.values()}
        # The kubelets first, so that they restart nothing; then every other daemon at once.
        kubelets = [key for key in recorded if key.split("-")[0] == "kubelet"]
        for group in (kubelets, [k for k in recorded if k not in kubelets and not _is_holder(k)]):
            procs = [recorded[k] for k in group if alive(*recorded[k])]
            for pid, _ in procs:
                send(pid, signal.SIGTERM)
            for pid, _ in wait_gone(procs, 10):
                send(pid, signal.SIGKILL)
        # The pods' processes (in the cluster's cgroups) and containerd's shims (in the nodes' namespaces).
        kill_all(lambda: self.cgroups.processes() + [p for ns in netns for p in processes_in(ns, exclude=set(holders.values()))])
        for pid, _ in holders.values():
            send(pid, signal.SIGKILL)
        wait_gone(holders.values(), 10)
        self.cgroups.remove()
        self._mount_points.remove(another_running=self._another_running)
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir, ignore_errors=True)
        # The other nodes' stores are copies of node 0's, made anew at each start: an old one would
        # keep an image node 0 has since pruned.
        shutil.rmtree(self.home / "nodes", ignore_errors=True)
        Path(self.kubeconfig).unlink(missing_ok=True)

    def _another_running(self) -> bool:
        """Whether another cluster of this machine holds its node namespace."""
        for pids_file in (CACHE / "cluster").glob("*/run/pids.json"):
            holder = Daemons(pids_file.parent).recorded().get("holder") if pids_file.parent.parent.name != self.name else None
            if holder and alive(*holder):
                return True
        return False

    def status(self) -> dict[str, Any]:
        recorded = self.daemons.recorded()
        if not recorded:
            return {"running": False}
        states = {k: alive(*v) for k, v in recorded.items()}
        return {"running": all(states.values()), "processes": states, "kubeconfig": self.kubeconfig}

    # --- helpers for tests ---------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.kubectl_argv(*args), input=input, capture_output=True, text=True,
                              timeout=timeout, env=self.kubectl_env)  # fmt: skip
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def api_read(self, path: str, **query: str) -> tuple[int, bytes]:
        """A GET on the API server as its admin, for reads a test repeats while it waits: a kubectl
        process costs about 0.1 s of CPU a call, a request from this process a few milliseconds."""
        return api.read(self.server, self.run_dir / "pki" / "ca.crt", self._tokens["admin"], path, **query)

    def kubectl_argv(self, *args: str) -> list[str]:
        return ["kubectl", "--kubeconfig", self.kubeconfig, *args]

    @property
    def kubectl_env(self) -> dict[str, str]:
        """kubectl's discovery cache goes into the run, not ~/.kube."""
        return {**os.environ, "KUBECACHEDIR": str(self.run_dir / "kubecache")}

    def in_namespace(self, *argv: str, timeout: float = 60, node: str | None = None) -> subprocess.CompletedProcess:
        """Runs a command inside a node's network and mount namespaces (as that node; node 0's,
        the control plane's, by default)."""
        namespace = self.node_named(node).namespace if node else self.node
        return namespace.run(*argv, timeout=timeout)

    # --- a node's faults (faults.py) -------------------------------------------------------

    def crash_node(self, name: str) -> None:
        """Node `name` fails at once: its daemons and containers killed, its network cut."""
        faults.crash(self, self.node_named(name))

    def restart_node(self, name: str) -> None:
        """A crashed node boots again: its network back, its runtime and daemons started anew (and
        its Node object, if it was deleted meanwhile, registered again with its labels)."""
        faults.restart(self, self.node_named(name), self._binaries, time.monotonic() + self.startup_timeout)
        self._label(self.node_named(name))

    def _label(self, each: ClusterNode) -> None:
        if each.labels:
            self.kubectl("label", "node", each.name, "--overwrite", *(f"{k}={v}" for k, v in each.labels.items()))

    def cut_node(self, name: str, connected: bool = False) -> None:
        """Node `name` cut off the nodes' network while its processes run on (or connected again)."""
        self.switch.set_port(self.node_named(name).index, up=connected)

    def tag_image(self, source: str, target: str) -> None:
        """Gives an imported image another name (what a manifest's `image:` resolves to), on every node."""
        for each in self.nodes:
            each.containerd.tag(source, target)

    # --- for the parts ---------------------------------------------------------------------

    def spawn(self, key: str, argv: list[str]) -> None:
        """A daemon of the control plane, inside its namespaces."""
        self.daemons.popen(key, self.node.entered(*argv))

    def spawn_on(self, node: ClusterNode, daemon: str, argv: list[str]) -> None:
        """A daemon of `node`, inside its namespaces."""
        self.daemons.popen(node.key(daemon), node.namespace.entered(*argv))

    def probe_ok(self, url: str, node: ClusterNode | None = None) -> bool:
        """An HTTP GET of `url` from inside a node's namespace (node 0's by default) succeeds."""
        probe = f"import urllib.request; urllib.request.urlopen('{url}', timeout=2)"
        return (node or self.nodes[0]).namespace.run(sys.executable, "-c", probe, timeout=10).returncode == 0

    def _start_relay(self) -> None:
        port = free_port()
        self.daemons.popen("relay", [sys.executable, "-m", "toolchain.cluster", "relay", str(port), str(self.node.holder), str(API_PORT)],
                           cwd=str(HERE.parent))  # fmt: skip
        self.server = f"https://127.0.0.1:{port}"
        certificates.write_kubeconfig(Path(self.kubeconfig), self.context, self.server, self.run_dir / "pki" / "ca.crt", self._tokens["admin"])

    def _default_service_account(self) -> bool:
        return self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0


def _is_holder(key: str) -> bool:
    """A process that holds namespaces open: the switch's, and each node's."""
    return key == "switch" or key.split("-")[0] == "holder"
