"""LocalCluster: one cluster's start, stop and status, and the helpers tests use on it. What each
part is and does lives in the module named for it (see the package's docstring)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable

from toolchain import certificates
from toolchain import control_plane as api
from toolchain.apiserver import find_tool, free_port, tool_dir

from . import control_plane, credentials, node
from .addons import ADDONS, start_addon
from .cgroups import ClusterCgroups
from .containerd import Containerd
from .namespaces import MountPoints, NodeNamespace, processes_in
from .network import API_PORT
from .processes import ClusterError, Daemons, alive, send, wait_gone

HERE = Path(__file__).resolve().parent.parent  # toolchain/
CACHE = Path(os.environ.get("DDP_INFRA_CACHE", Path.home() / ".cache" / "ddp-infra"))
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "coredns", "kube-router")


def image_archives() -> dict[str, tuple[str, Path]]:
    """{name: (image ref, docker-archive tar)} of the images toolchain/images.sh builds."""
    out = subprocess.run([str(HERE / "images.sh"), "--print"], capture_output=True, text=True, check=True)
    images = {}
    for line in out.stdout.splitlines():
        name, ref, tar = line.split()
        images[name] = (ref, Path(tar))
    return images


class LocalCluster:
    """A single-node cluster; a context manager. See the package's docstring.

    Attributes once started: kubeconfig (for kubectl and Pulumi on this machine, context
    `ddp-infra-<name>`), node_name, images ({name: ref}), startup_seconds, run_dir.
    """

    def __init__(self, name: str = "ddp-infra", *, bin_dir: Path | None = None, startup_timeout: float = 240.0,
                 with_images: bool | Iterable[str] = True, domain: str = "cluster.local", addons: Iterable[str] = (),
                 workload_api: bool = False):
        self.name = name
        self.addons = tuple(addons)
        # The alpha Workload API and its gang scheduling (control_plane.WORKLOAD_API_FLAGS): with
        # them, the Job controller gangs every Indexed Job whose parallelism equals its completions.
        self.workload_api = workload_api
        unknown = sorted(set(self.addons) - set(ADDONS))
        if unknown:
            raise ClusterError(f"unknown add-on(s) {', '.join(unknown)}; known: {', '.join(ADDONS)}")
        self.domain = domain  # the cluster domain: CoreDNS's zone, the kubelet's clusterDomain
        self.home = CACHE / "cluster" / name
        self.run_dir = self.home / "run"
        self.bin_dir = bin_dir or tool_dir()
        self.startup_timeout = startup_timeout
        # True: every image images.sh builds; or the names of those to import (pause is always one).
        self.with_images = with_images
        self.node_name = f"{name}-node"
        self.cgroup_root = f"/ddp-infra-{name}"
        self.context = f"ddp-infra-{name}"
        self.kubeconfig = str(self.home / "kubeconfig")
        self.images: dict[str, str] = {}
        self.server: str | None = None  # the API server's URL on this machine (the relay)
        self.startup_seconds: float | None = None
        self.daemons = Daemons(self.run_dir)
        self.containerd = Containerd(self.run_dir, self.home / "containerd")
        self.cgroups = ClusterCgroups(self.cgroup_root)
        self.node: NodeNamespace | None = None
        self._mount_points = MountPoints(CACHE / "cluster" / "made-dirs.json")  # shared by every cluster
        self._tokens: dict[str, str] = {}

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
        images = self._wanted_images()
        for ref, tar in images.values():
            if not tar.is_file():
                raise ClusterError(f"image {ref} is not built ({tar} missing): run `make setup` (toolchain/images.sh)")
        self.run_dir.mkdir(parents=True)
        self.daemons = Daemons(self.run_dir)
        self.daemons.logs.mkdir()
        try:
            self.node = NodeNamespace.start(self.daemons, self.run_dir, self._mount_points)
            self._tokens = credentials.write_credentials(
                self.run_dir / "pki", name=self.name, node_name=self.node_name, domain=self.domain, context=self.context,
                addon_users={name: ADDONS[name].user for name in self.addons},
            )  # fmt: skip
            self.cgroups.make()
            self.containerd.start(self.daemons, self.node, images.get("pause", ("", None))[0], time.monotonic() + 60)
            self.containerd.import_images(images)
            # A first import takes minutes on a busy machine and is bounded on its own: the
            # cluster's startup time counts from here.
            deadline = time.monotonic() + self.startup_timeout
            control_plane.start_etcd_and_apiserver(self, binaries)
            self._start_relay()
            self.daemons.wait(lambda: api.ready(self.server, self.run_dir / "pki" / "ca.crt", self._tokens["admin"]),
                              deadline, "kube-apiserver /readyz")  # fmt: skip
            control_plane.bootstrap_objects(self)
            control_plane.start_controllers(self, binaries)
            node.start_node(self, binaries)
            self.daemons.wait(lambda: node.node_ready(self), deadline, f"node {self.node_name} Ready")
            node.start_network_policy(self, binaries)
            self.daemons.wait(lambda: node.dns_ready(self), deadline, "CoreDNS ready")
            self.daemons.wait(lambda: node.policy_ready(self), deadline, "kube-router's network policy controller")
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

    def _wanted_images(self) -> dict[str, tuple[str, Path]]:
        if self.with_images is False:
            return {}
        built = image_archives()
        if self.with_images is True:
            return built
        return {name: built[name] for name in {"pause", *self.with_images}}

    def stop(self) -> None:
        """Ends every process of this cluster (also a crashed earlier run's) and removes its state."""
        recorded = self.daemons.recorded()
        holder = recorded.get("holder")
        netns = None
        if holder and alive(*holder):
            netns = os.readlink(f"/proc/{holder[0]}/ns/net")
        # The kubelet first, so that it restarts nothing; then every other daemon at once.
        for group in (["kubelet"], [k for k in recorded if k not in ("kubelet", "holder")]):
            procs = [recorded[k] for k in group if k in recorded and alive(*recorded[k])]
            for pid, _ in procs:
                send(pid, signal.SIGTERM)
            for pid, _ in wait_gone(procs, 10):
                send(pid, signal.SIGKILL)
        # The pods' processes (in the cluster's cgroups) and containerd's shims (in its namespace).
        for _ in range(3):
            stray = self.cgroups.processes() + (processes_in(netns, exclude=holder) if netns else [])
            if not stray:
                break
            for pid, _st in stray:
                send(pid, signal.SIGKILL)
            wait_gone(stray, 10)
        if holder and alive(*holder):
            send(holder[0], signal.SIGKILL)
            wait_gone([holder], 10)
        self.cgroups.remove()
        self._mount_points.remove(another_running=self._another_running)
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir, ignore_errors=True)
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

    def kubectl_argv(self, *args: str) -> list[str]:
        return ["kubectl", "--kubeconfig", self.kubeconfig, *args]

    @property
    def kubectl_env(self) -> dict[str, str]:
        """kubectl's discovery cache goes into the run, not ~/.kube."""
        return {**os.environ, "KUBECACHEDIR": str(self.run_dir / "kubecache")}

    def in_namespace(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Runs a command inside the cluster's network and mount namespaces (as the node)."""
        return self.node.run(*argv, timeout=timeout)

    def tag_image(self, source: str, target: str) -> None:
        """Gives an imported image another name (what a manifest's `image:` resolves to)."""
        self.containerd.tag(source, target)

    # --- for the parts ---------------------------------------------------------------------

    def spawn(self, key: str, argv: list[str]) -> None:
        """A daemon inside the cluster's namespaces."""
        self.daemons.popen(key, self.node.entered(*argv))

    def probe_ok(self, url: str) -> bool:
        """An HTTP GET of `url` from inside the node's namespace succeeds."""
        probe = f"import urllib.request; urllib.request.urlopen('{url}', timeout=2)"
        return self.in_namespace(sys.executable, "-c", probe, timeout=10).returncode == 0

    def _start_relay(self) -> None:
        port = free_port()
        self.daemons.popen("relay", [sys.executable, "-m", "toolchain.cluster", "relay", str(port), str(self.node.holder), str(API_PORT)],
                           cwd=str(HERE.parent))  # fmt: skip
        self.server = f"https://127.0.0.1:{port}"
        certificates.write_kubeconfig(Path(self.kubeconfig), self.context, self.server, self.run_dir / "pki" / "ca.crt", self._tokens["admin"])

    def _default_service_account(self) -> bool:
        return self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0
