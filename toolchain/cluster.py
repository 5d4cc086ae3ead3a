"""A real single-node Kubernetes cluster on this machine, for tests and for people.

    python -m toolchain.cluster up      # prints the kubeconfig to use with kubectl or Pulumi
    python -m toolchain.cluster down    # ends every process it started, leaves nothing behind
    python -m toolchain.cluster status

    from toolchain.cluster import LocalCluster
    with LocalCluster("test") as cluster:
        cluster.kubectl("get", "nodes")
    LocalCluster("jobs", addons=("jobset",))   # with the JobSet controller (toolchain/jobset.py)
    LocalCluster("queues", addons=("kueue",))  # with the Kueue controller (toolchain/kueue.py)
    LocalCluster("gangs", addons=("volcano",))  # with Volcano's scheduler (toolchain/volcano.py)

Every part comes from this machine: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kubelet and kube-proxy (one Kubernetes version) and CoreDNS built from Go
modules by toolchain/build.sh; containerd, runc and the CNI plugins from Debian; the pause and
trainer images from toolchain/images.sh, imported into containerd (there is no registry).
Add-ons (`addons=`, `up --addon`): the JobSet and Kueue controllers and Volcano's scheduler, also
built by toolchain/build.sh, each run as a process beside CoreDNS (toolchain/controller_addon.py
and toolchain/volcano.py say why and how).

Isolation: the whole cluster lives in a network namespace and a mount namespace of its own,
held open by one `unshare` process that every daemon is entered into (`nsenter`). Inside, the
node's address sits on one end of a veth pair whose other end is in the same namespace, with
the default route pointing at it: no packet can leave for any address outside this machine,
and nothing changes on the machine's own network (routes, bridges, iptables). Pods get a bridge
inside that namespace. The API server is reached from outside through a relay on 127.0.0.1
(the only thing listening in the machine's own network namespace).

State: `<cache>/cluster/<name>/run` (certificates, etcd, the kubelet's directory, logs) is made
fresh at each start and removed at stop; containerd's image store, `<cache>/cluster/<name>/
containerd`, is kept, so the images are imported once. Every process is recorded with its start
time in `run/pids.json`; `stop()` ends them all (also the pods' processes, found through the
cluster's own cgroups, and containerd's shims, found through the namespace), and `start()` first
cleans up whatever a crashed earlier run left.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterable

from toolchain import volcano
from toolchain.controller_addon import AddOn, ControllerAddOn
from toolchain.jobset import JOBSET
from toolchain.kueue import KUEUE
from toolchain.volcano import VOLCANO
from toolchain.apiserver import find_tool, free_port, tool_dir

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("DDP_INFRA_CACHE", Path.home() / ".cache" / "ddp-infra"))

# Addresses inside the cluster's own network namespace: nothing outside it can see them.
NODE_IP = "10.99.0.2"
GATEWAY_IP = "10.99.0.1"
POD_CIDR = "10.244.0.0/24"
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
API_PORT = 6443
LOCAL_STORAGE_CLASS = "local"
LOCAL_PROVISIONER = "kubernetes.io/no-provisioner"  # static volumes: no provisioner makes them
# Released volumes are not reused (Retain, as a cloud disk would be kept): one per claim a test suite makes.
PERSISTENT_VOLUMES = 32
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "coredns")
# Optional controllers and schedulers, each a binary of the toolchain started with the cluster, in
# this order (Kueue manages JobSets when JobSet's CRD is there when it starts).
ADDONS: dict[str, AddOn] = {addon.name: addon for addon in (JOBSET, KUEUE, VOLCANO)}


class ClusterError(RuntimeError):
    pass


def image_archives() -> dict[str, tuple[str, Path]]:
    """{name: (image ref, docker-archive tar)} of the images toolchain/images.sh builds."""
    out = subprocess.run([str(HERE / "images.sh"), "--print"], capture_output=True, text=True, check=True)
    images = {}
    for line in out.stdout.splitlines():
        name, ref, tar = line.split()
        images[name] = (ref, Path(tar))
    return images


def _start_time(pid: int) -> str | None:
    """The kernel's start time of a process (field 22 of /proc/PID/stat), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # exited; only its parent's wait is missing
        _reap(pid)
        return None
    return fields[19]


def _reap(pid: int) -> None:
    """Collects a zombie that is this process's own child (a daemon this process started)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _alive(pid: int, start_time: str) -> bool:
    """The recorded process is still running (not a later process that reuses its id)."""
    return _start_time(pid) == start_time


def _wait_gone(pids: Iterable[tuple[int, str]], timeout: float) -> list[tuple[int, str]]:
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [(pid, st) for pid, st in pids if _alive(pid, st)]
        if not pids:
            return []
        time.sleep(0.1)
    return [(pid, st) for pid, st in pids if _alive(pid, st)]


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _cgroup_mounts() -> list[Path]:
    """Mount points of every cgroup v1 hierarchy (this machine runs cgroup v1, no systemd)."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype == "cgroup":
            mounts.append(Path(fields[4]))
    return mounts


# --- the relay: 127.0.0.1 on the machine -> the API server inside the cluster's namespace ----

CLONE_NEWNET = 0x40000000


def _relay(listen_port: int, netns_pid: int, target_port: int) -> None:
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


class LocalCluster:
    """A single-node cluster; a context manager. See the module's docstring.

    Attributes once started: kubeconfig (for kubectl and Pulumi on this machine, context
    `ddp-infra-<name>`), node_name, images ({name: ref}), startup_seconds, run_dir.
    """

    def __init__(self, name: str = "ddp-infra", *, bin_dir: Path | None = None, startup_timeout: float = 240.0,
                 with_images: bool | Iterable[str] = True, domain: str = "cluster.local", addons: Iterable[str] = ()):
        self.name = name
        self.addons = tuple(addons)
        unknown = sorted(set(self.addons) - set(ADDONS))
        if unknown:
            raise ClusterError(f"unknown add-on(s) {', '.join(unknown)}; known: {', '.join(ADDONS)}")
        self.domain = domain  # the cluster domain: CoreDNS's zone, the kubelet's clusterDomain
        self.home = CACHE / "cluster" / name
        self.run_dir = self.home / "run"
        self.containerd_root = self.home / "containerd"
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
        self._holder: int | None = None
        self._made_dirs = self.home / "made-dirs.json"

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
        (self.run_dir / "logs").mkdir()
        self._pids: dict[str, tuple[int, str]] = {}
        try:
            self._start_holder()
            self._write_credentials()
            self._make_cgroups()
            self._start_containerd(images.get("pause", ("", None))[0])
            self._import_images(images)
            # A first import takes minutes on a busy machine and is bounded on its own: the
            # cluster's startup time counts from here.
            deadline = time.monotonic() + self.startup_timeout
            self._spawn("etcd", [
                binaries["etcd"], "--name", "default", "--data-dir", str(self.run_dir / "etcd"),
                "--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
                "--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
                "--initial-cluster", "default=http://127.0.0.1:2380",
                "--unsafe-no-fsync", "--log-level", "warn",
            ])  # fmt: skip
            self._start_apiserver(binaries["kube-apiserver"])
            self._start_relay()
            self._wait(self._readyz, deadline, "kube-apiserver /readyz")
            self._bootstrap_objects()
            self._start_node(binaries)
            self._wait(self._node_ready, deadline, f"node {self.node_name} Ready")
            self._wait(self._dns_ready, deadline, "CoreDNS ready")
            self._wait(self._default_service_account, deadline, "the default ServiceAccount (controllers running)")
            for addon in ADDONS.values():
                if addon.name in self.addons and isinstance(addon, ControllerAddOn):
                    self._start_addon(addon, binaries[addon.manager], deadline)
                elif addon.name in self.addons:
                    self._start_volcano(binaries[addon.manager], deadline)
        except BaseException:
            self._dump_logs()
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
        recorded = self._recorded()
        holder = recorded.get("holder")
        netns = None
        if holder and _alive(*holder):
            netns = os.readlink(f"/proc/{holder[0]}/ns/net")
        # The kubelet first, so that it restarts nothing; then every other daemon at once.
        for group in (["kubelet"], [k for k in recorded if k not in ("kubelet", "holder")]):
            procs = [recorded[k] for k in group if k in recorded and _alive(*recorded[k])]
            for pid, _ in procs:
                _signal(pid, signal.SIGTERM)
            for pid, _ in _wait_gone(procs, 10):
                _signal(pid, signal.SIGKILL)
        # The pods' processes (in the cluster's cgroups) and containerd's shims (in its namespace).
        for _ in range(3):
            stray = self._cgroup_processes() + (self._namespace_processes(netns, exclude=holder) if netns else [])
            if not stray:
                break
            for pid, _st in stray:
                _signal(pid, signal.SIGKILL)
            _wait_gone(stray, 10)
        if holder and _alive(*holder):
            _signal(holder[0], signal.SIGKILL)
            _wait_gone([holder], 10)
        self._remove_cgroups()
        if self._made_dirs.exists():
            for directory in reversed(json.loads(self._made_dirs.read_text())):
                try:
                    Path(directory).rmdir()
                except FileNotFoundError:
                    pass
            self._made_dirs.unlink()
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir, ignore_errors=True)
        Path(self.kubeconfig).unlink(missing_ok=True)

    def status(self) -> dict[str, Any]:
        recorded = self._recorded()
        if not recorded:
            return {"running": False}
        alive = {k: _alive(*v) for k, v in recorded.items()}
        return {"running": all(alive.values()), "processes": alive, "kubeconfig": self.kubeconfig}

    # --- helpers for tests ---------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.kubectl_argv(*args), input=input, capture_output=True, text=True,
                              timeout=timeout, env=self.kubectl_env)
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
        return subprocess.run(self._entered(*argv), capture_output=True, text=True, timeout=timeout)

    def _entered(self, *argv: str) -> list[str]:
        """argv run inside the cluster's namespaces; nsenter execs it, so its pid is argv's."""
        return ["nsenter", "-t", str(self._holder), "-m", "-n", "--", *argv]

    def tag_image(self, source: str, target: str) -> None:
        """Gives an imported image another name (what a manifest's `image:` resolves to)."""
        result = self._ctr("images", "tag", "--force", source, target)
        if result.returncode != 0:
            raise ClusterError(f"ctr images tag {source} {target} failed:\n{result.stderr}")

    # --- processes -------------------------------------------------------------------------

    def _recorded(self) -> dict[str, tuple[int, str]]:
        """{process: (pid, start time)} of the run in run_dir, crashed or not; empty if none."""
        pids_file = self.run_dir / "pids.json"
        if not pids_file.exists():
            return {}
        return {key: tuple(value) for key, value in json.loads(pids_file.read_text()).items()}

    def _record(self, key: str, pid: int) -> None:
        start_time = _start_time(pid)
        if start_time is None:
            raise ClusterError(f"{key} exited at once:\n{self._tail(key)}")
        self._pids[key] = (pid, start_time)
        (self.run_dir / "pids.json").write_text(json.dumps(self._pids))

    def _popen(self, key: str, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        with open(self.run_dir / "logs" / f"{key}.log", "ab") as log:
            # A session of its own: `cluster up` returns and the daemons stay, Ctrl-C in a test
            # run reaches pytest alone, whose teardown stops them in order.
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, **kwargs)
        self._record(key, proc.pid)
        return proc

    def _spawn(self, key: str, argv: list[str]) -> None:
        """A daemon inside the cluster's namespaces."""
        self._popen(key, self._entered(*argv))

    def _tail(self, key: str, lines: int = 40) -> str:
        path = self.run_dir / "logs" / f"{key}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _check_alive(self) -> None:
        for key, (pid, st) in self._pids.items():
            if not _alive(pid, st):
                raise ClusterError(f"{key} exited; the end of its log:\n{self._tail(key)}")

    def _wait(self, ready, deadline: float, what: str) -> None:
        last: Any = None
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                if ready():
                    return
            except Exception as error:  # noqa: BLE001 - kept as the reason if it never gets ready
                last = error
            time.sleep(0.25)
        raise ClusterError(f"timed out after {self.startup_timeout:.0f} s waiting for {what} (last: {last})")

    def _dump_logs(self) -> None:
        logs = self.run_dir / "logs"
        if logs.exists():
            keep = CACHE / "cluster" / f"{self.name}-failed-logs"
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(logs, keep)
            print(f"[cluster] start failed; logs kept in {keep}", file=sys.stderr)

    def _namespace_processes(self, netns: str, exclude: tuple[int, str] | None) -> list[tuple[int, str]]:
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
            st = _start_time(pid)
            if st and (exclude is None or pid != exclude[0]):
                found.append((pid, st))
        return found

    def _cgroup_dirs(self) -> list[Path]:
        dirs = []
        for mount in _cgroup_mounts():
            root = mount / self.cgroup_root.lstrip("/")
            if root.is_dir():
                dirs.extend(sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True))
                dirs.append(root)
        return dirs

    def _cgroup_processes(self) -> list[tuple[int, str]]:
        found = set()
        for directory in self._cgroup_dirs():
            try:
                pids = (directory / "cgroup.procs").read_text().split()
            except OSError:
                continue
            for pid in map(int, pids):
                st = _start_time(pid)
                if st:
                    found.add((pid, st))
        return sorted(found)

    def _remove_cgroups(self) -> None:
        deadline = time.monotonic() + 15
        while True:
            left = []
            for directory in self._cgroup_dirs():
                try:
                    directory.rmdir()
                except OSError:
                    left.append(directory)
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if left:
            raise ClusterError(f"cgroups still in use after stop: {', '.join(map(str, left[:5]))}")

    # --- the node's namespaces ----------------------------------------------------------------

    def _start_holder(self) -> None:
        # Mount events from the machine still reach the namespace (slave), none go back.
        proc = self._popen("holder", ["unshare", "--net", "--mount", "--propagation", "slave", "--", "sleep", "infinity"])
        self._holder = proc.pid
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{proc.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            if time.monotonic() > deadline:
                raise ClusterError("unshare did not enter a new network namespace")
            time.sleep(0.05)
        kubelet_dir, cni_dir, log_dir = (self.run_dir / d for d in ("kubelet", "cni-state", "var-log"))
        for d in (kubelet_dir, cni_dir, log_dir):
            d.mkdir()
        script = f"""
            set -eu
            ip link set lo up
            ip link add veth-node type veth peer name veth-gw
            ip addr add {NODE_IP}/24 dev veth-node
            ip link set veth-node up
            ip link set veth-gw up
            ip route add default via {GATEWAY_IP} dev veth-node onlink
            sysctl -qw net.ipv4.ip_forward=1
            sysctl -qw net.bridge.bridge-nf-call-iptables=1 || true
            # /run inside the namespace is its own: network namespaces, containerd's shim
            # sockets and iptables' lock never touch the machine's /run.
            mount -t tmpfs -o mode=0755 tmpfs /run
            mkdir -p /run/netns /run/containerd
            # The kubelet writes /var/lib/kubelet whatever its --root-dir says, libcni writes
            # /var/lib/cni, the kubelet and the runtime write /var/log/pods: all into run/.
            mount --bind {log_dir} /var/log
        """
        self._nsenter_script(script)
        # /var/lib/kubelet and /var/lib/cni must exist as mount points (a tmpfs over /var/lib would
        # hide the machine's package state from the daemons): a directory made for that is
        # recorded, and removed again at stop.
        for target, source in (("/var/lib/kubelet", kubelet_dir), ("/var/lib/cni", cni_dir)):
            self._bind_mount(source, target)

    def _bind_mount(self, source: Path, target: str) -> None:
        """`source` at `target` inside the cluster's mount namespace. The directories made on the machine
        for the mount point are recorded, and removed again at stop, deepest first."""
        made = json.loads(self._made_dirs.read_text()) if self._made_dirs.exists() else []
        missing = [path for path in (Path(target), *Path(target).parents) if not path.exists()]
        for directory in reversed(missing):
            directory.mkdir()
            made.append(str(directory))
            self._made_dirs.write_text(json.dumps(made))
        self._nsenter_script(f"mount --bind {source} {target}")

    def _nsenter_script(self, script: str) -> None:
        proc = self.in_namespace("sh", "-c", script)
        if proc.returncode != 0:
            raise ClusterError(f"setting up the cluster's namespace failed:\n{script}\n{proc.stderr}")

    def _make_cgroups(self) -> None:
        for mount in _cgroup_mounts():
            path = mount / self.cgroup_root.lstrip("/")
            path.mkdir(exist_ok=True)
            if (mount / "cpuset.cpus").exists():
                for key in ("cpuset.cpus", "cpuset.mems"):
                    (path / key).write_text((mount / key).read_text())

    # --- certificates and kubeconfigs -------------------------------------------------------

    def _openssl(self, *args: str) -> None:
        subprocess.run(["openssl", *args], cwd=self.run_dir / "pki", check=True, capture_output=True)

    def _write_credentials(self) -> None:
        pki = self.run_dir / "pki"
        pki.mkdir()
        self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-keyout", "ca.key",
                      "-out", "ca.crt", "-subj", f"/CN=ddp-infra-{self.name}-ca")
        sans = ",".join([
            f"IP:{NODE_IP}", "IP:127.0.0.1", f"IP:{KUBERNETES_SERVICE_IP}", "DNS:localhost", "DNS:kubernetes",
            "DNS:kubernetes.default", "DNS:kubernetes.default.svc", f"DNS:kubernetes.default.svc.{self.domain}",
        ])
        (pki / "apiserver.ext").write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n")
        self._openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out", "apiserver.csr",
                      "-subj", "/CN=kube-apiserver")
        self._openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                      "-days", "30", "-out", "apiserver.crt", "-extfile", "apiserver.ext")
        self._openssl("genrsa", "-out", "service-account.key", "2048")
        # One bearer token per identity; RBAC and the Node authorizer see the same users and
        # groups a kubeadm cluster's certificates would give them.
        identities = {
            "admin": ("ddp-infra:admin", "system:masters"),
            "kube-controller-manager": ("system:kube-controller-manager", ""),
            "kube-scheduler": ("system:kube-scheduler", ""),
            "kubelet": (f"system:node:{self.node_name}", "system:nodes"),
            "kube-proxy": ("system:kube-proxy", ""),
            "coredns": ("ddp-infra:coredns", ""),
            **{name: (ADDONS[name].user, "") for name in self.addons},
        }
        self._tokens = {key: secrets.token_hex(16) for key in identities}
        lines = [f'{self._tokens[key]},{user},{user},"{group}"' for key, (user, group) in identities.items()]
        (pki / "tokens.csv").write_text("\n".join(lines) + "\n")
        for key in identities:
            self._write_kubeconfig(pki / f"{key}.kubeconfig", f"https://127.0.0.1:{API_PORT}", self._tokens[key])

    def _write_kubeconfig(self, path: Path, server: str, token: str) -> None:
        # JSON is YAML: kubectl, client-go and the Pulumi provider read it as a kubeconfig.
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.context, "cluster": {"server": server, "certificate-authority": str(self.run_dir / "pki" / "ca.crt")}}],
            "users": [{"name": self.context, "user": {"token": token}}],
            "contexts": [{"name": self.context, "context": {"cluster": self.context, "user": self.context}}],
            "current-context": self.context,
        }  # fmt: skip
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)

    # --- containerd -------------------------------------------------------------------------

    @property
    def containerd_socket(self) -> str:
        return str(self.run_dir / "containerd.sock")

    def _start_containerd(self, pause_ref: str) -> None:
        self.containerd_root.mkdir(parents=True, exist_ok=True)
        cni_conf = self.run_dir / "cni" / "net.d"
        cni_conf.mkdir(parents=True)
        (cni_conf / "10-ddp-infra.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0",
            "name": "ddp-infra",
            "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]], "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }, indent=2))  # fmt: skip
        config = f"""version = 2
root = "{self.containerd_root}/root"
state = "/run/containerd"
[grpc]
  address = "{self.containerd_socket}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.containerd_root}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_ref}"
  # Processes here lack CAP_SYS_RESOURCE: without this, runc fails writing oom_score_adj.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni_conf}"
"""
        (self.run_dir / "containerd.toml").write_text(config)
        self._spawn("containerd", ["containerd", "--config", str(self.run_dir / "containerd.toml")])
        self._wait(lambda: self._ctr("version").returncode == 0, time.monotonic() + 60, "containerd")
        # Containers of a crashed earlier run: their tasks died with their shims.
        for container in self._ctr("containers", "ls", "-q").stdout.split():
            self._ctr("tasks", "rm", "-f", container)
            self._ctr("containers", "rm", container)

    def _ctr(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(["ctr", "--address", self.containerd_socket, "-n", "k8s.io", *args],
                              capture_output=True, text=True, timeout=timeout)

    def _import_images(self, images: dict[str, tuple[str, Path]]) -> None:
        present = set(self._ctr("images", "ls", "-q").stdout.split())
        for ref, tar in images.values():
            if ref in present:
                continue
            began = time.monotonic()
            result = self._ctr("images", "import", str(tar), timeout=1800)
            if result.returncode != 0:
                raise ClusterError(f"ctr images import {tar} failed:\n{result.stderr}")
            print(f"[cluster] imported {ref} in {time.monotonic() - began:.0f} s", file=sys.stderr)
        # Keep only the images of the current build: old keys would fill the disk.
        wanted = {ref for ref, _ in images.values()}
        for ref in present - wanted:
            if ref.startswith("localhost/ddp-infra/"):
                self._ctr("images", "rm", ref)

    # --- control plane ---------------------------------------------------------------------

    def _start_apiserver(self, binary: str) -> None:
        pki = self.run_dir / "pki"
        self._spawn("kube-apiserver", [
            binary,
            "--etcd-servers", "http://127.0.0.1:2379",
            "--bind-address", "0.0.0.0", "--secure-port", str(API_PORT), "--advertise-address", NODE_IP,
            "--tls-cert-file", str(pki / "apiserver.crt"), "--tls-private-key-file", str(pki / "apiserver.key"),
            "--client-ca-file", str(pki / "ca.crt"),
            "--token-auth-file", str(pki / "tokens.csv"),
            "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", "NodeRestriction",
            "--service-account-issuer", f"https://kubernetes.default.svc.{self.domain}",
            "--service-account-key-file", str(pki / "service-account.key"),
            "--service-account-signing-key-file", str(pki / "service-account.key"),
            "--service-cluster-ip-range", SERVICE_CIDR,
            # logs, exec and port-forward reach the kubelet by its address, not a DNS lookup
            "--kubelet-preferred-address-types", "InternalIP,Hostname",
            "--profiling=false",
        ])  # fmt: skip

    def _start_relay(self) -> None:
        port = free_port()
        self._popen("relay", [sys.executable, "-m", "toolchain.cluster", "relay", str(port), str(self._holder), str(API_PORT)],
                    cwd=str(HERE.parent))
        self._write_kubeconfig(Path(self.kubeconfig), f"https://127.0.0.1:{port}", self._tokens["admin"])
        self.server = f"https://127.0.0.1:{port}"

    def _readyz(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.run_dir / "pki" / "ca.crt"))
        request = urllib.request.Request(f"{self.server}/readyz", headers={"Authorization": f"Bearer {self._tokens['admin']}"})
        try:
            with urllib.request.urlopen(request, context=context, timeout=5) as response:
                return response.status == 200
        except urllib.error.HTTPError:
            return False

    def _bootstrap_objects(self) -> None:
        """What a cluster installer adds: CoreDNS's read access, and local storage for claims."""
        volumes = self.run_dir / "volumes"
        objects: list[dict[str, Any]] = [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "ddp-infra:coredns"},
             "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
                       {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "ddp-infra:coredns"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ddp-infra:coredns"},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "ddp-infra:coredns"}]},
            # The default class: claims without a class (the dev stack's) bind to a local volume
            # once their pod is scheduled, as on a cloud cluster's default class.
            {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
             "metadata": {"name": LOCAL_STORAGE_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
             "provisioner": LOCAL_PROVISIONER, "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Retain"},
        ]  # fmt: skip
        for i in range(PERSISTENT_VOLUMES):
            path = volumes / f"pv-{i}"
            path.mkdir(parents=True)
            objects.append({
                "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"local-pv-{i}"},
                "spec": {
                    "capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany"],
                    "persistentVolumeReclaimPolicy": "Retain", "storageClassName": LOCAL_STORAGE_CLASS,
                    "local": {"path": str(path)},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": [self.node_name]}]}]}},
                },
            })  # fmt: skip
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))

    def _control_plane_flags(self, component: str) -> list[str]:
        """The controller-manager's and the scheduler's identity, serving address and one instance."""
        kubeconfig = str(self.run_dir / "pki" / f"{component}.kubeconfig")
        return ["--kubeconfig", kubeconfig, "--authentication-kubeconfig", kubeconfig,
                "--authorization-kubeconfig", kubeconfig, "--bind-address", "127.0.0.1", "--leader-elect=false"]

    def _start_node(self, binaries: dict[str, str]) -> None:
        pki = self.run_dir / "pki"
        self._spawn("kube-controller-manager", [
            binaries["kube-controller-manager"],
            *self._control_plane_flags("kube-controller-manager"),
            "--use-service-account-credentials",
            "--service-account-private-key-file", str(pki / "service-account.key"),
            "--root-ca-file", str(pki / "ca.crt"),
            "--cluster-signing-cert-file", str(pki / "ca.crt"), "--cluster-signing-key-file", str(pki / "ca.key"),
            "--cluster-name", f"ddp-infra-{self.name}",
            "--service-cluster-ip-range", SERVICE_CIDR,
        ])  # fmt: skip
        self._spawn("kube-scheduler", [
            binaries["kube-scheduler"],
            *self._control_plane_flags("kube-scheduler"),
        ])  # fmt: skip
        resolv = self.run_dir / "resolv.conf"
        # Pods resolve through the cluster DNS only: no name outside the cluster is forwarded anywhere.
        resolv.write_text(f"nameserver {NODE_IP}\n")
        kubelet_config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # cgroup v1 without systemd as PID 1
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "cgroupRoot": self.cgroup_root,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "clusterDNS": [NODE_IP],
            "clusterDomain": self.domain,
            "resolvConf": str(resolv),
            "address": NODE_IP,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            # Only the API server reaches the kubelet, from inside the namespace.
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "failSwapOn": False,
            # The imported images are the only copies (no registry to pull them again from).
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "volumePluginDir": "/var/lib/kubelet/volume-plugins",
            "serializeImagePulls": False,
        }
        (self.run_dir / "kubelet.json").write_text(json.dumps(kubelet_config, indent=2))
        self._spawn("kubelet", [
            binaries["kubelet"],
            "--config", str(self.run_dir / "kubelet.json"),
            "--kubeconfig", str(pki / "kubelet.kubeconfig"),
            "--hostname-override", self.node_name,
            "--node-ip", NODE_IP,
            "--root-dir", "/var/lib/kubelet",
            "--cert-dir", "/var/lib/kubelet/pki",
        ])  # fmt: skip
        self._spawn("kube-proxy", [
            binaries["kube-proxy"],
            "--kubeconfig", str(pki / "kube-proxy.kubeconfig"),
            "--hostname-override", self.node_name,
            "--proxy-mode", "iptables",
            "--cluster-cidr", POD_CIDR,
            # change no machine-wide conntrack setting
            "--conntrack-max-per-core", "0",
            "--conntrack-tcp-timeout-established", "0s",
            "--conntrack-tcp-timeout-close-wait", "0s",
            "--metrics-bind-address", "127.0.0.1:10249",
            "--healthz-bind-address", "127.0.0.1:10256",
        ])  # fmt: skip
        corefile = self.run_dir / "Corefile"
        corefile.write_text(f""".:53 {{
    bind {NODE_IP}
    errors
    ready {NODE_IP}:8181
    kubernetes {self.domain} in-addr.arpa ip6.arpa {{
        kubeconfig {pki / 'coredns.kubeconfig'} {self.context}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
}}
""")
        self._spawn("coredns", [binaries["coredns"], "-conf", str(corefile)])

    # --- add-ons ----------------------------------------------------------------------------------

    def _start_addon(self, addon: ControllerAddOn, binary: str, deadline: float) -> None:
        """A controller as a process beside CoreDNS; see toolchain/controller_addon.py for why."""
        install = addon.install_manifests(binary)
        pki, home = self.run_dir / "pki", self.run_dir / addon.name
        certs = home / "certs"
        certs.mkdir(parents=True)
        # controller-runtime's webhook server reads tls.crt and tls.key from its certDir.
        (pki / f"{addon.name}-webhook.ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        self._openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(certs / "tls.key"), "-out", f"{addon.name}-webhook.csr",
                      "-subj", f"/CN={addon.name}-webhook")
        self._openssl("x509", "-req", "-in", f"{addon.name}-webhook.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                      "-days", "30", "-out", str(certs / "tls.crt"), "-extfile", f"{addon.name}-webhook.ext")
        (home / "config.json").write_text(addon.manager_configuration(certs, self.addons))
        for directory in addon.fixed_cert_dirs:
            self._bind_mount(certs, directory)
        # The CRDs are larger than client-side apply's annotation allows: server-side apply.
        self._apply_server_side(addon.api_objects(install))
        # A manager started before its CRDs are served waits on its informers until it gives up.
        for crd in addon.crds:
            self._wait(lambda: self._crd_established(crd), deadline, f"CRD {crd} established")
        self._spawn(addon.manager, [binary, "--config", str(home / "config.json"), "--kubeconfig", str(pki / f"{addon.name}.kubeconfig")])
        self._wait(lambda: self._probe_ok(f"http://127.0.0.1:{addon.health_port}/readyz"), deadline, f"the {addon.manager}'s /readyz")
        self._apply_server_side(addon.webhook_configurations(install, (pki / "ca.crt").read_bytes()))
        self._wait(lambda: self._webhooks_answer(addon), deadline, f"{addon.name}'s webhooks answering the API server")

    def _start_volcano(self, binary: str, deadline: float) -> None:
        """Volcano's scheduler as a process beside CoreDNS; see toolchain/volcano.py for why."""
        crds_dir = Path(binary).resolve().parent / volcano.CRDS_DIR
        self._apply_server_side(volcano.api_objects(crds_dir))
        for crd in volcano.ESTABLISHED:
            self._wait(lambda: self._crd_established(crd), deadline, f"CRD {crd} established")
        self._apply_server_side([volcano.default_queue()])
        self._spawn(VOLCANO.manager, [binary, *volcano.scheduler_args(self.run_dir / "pki" / f"{VOLCANO.name}.kubeconfig", LOCAL_PROVISIONER)])
        self._wait(lambda: self._probe_ok(f"http://127.0.0.1:{volcano.HEALTH_PORT}/healthz"), deadline, "the Volcano scheduler's /healthz")

    def _apply_server_side(self, objects: list[dict[str, Any]]) -> None:
        self.kubectl("apply", "--server-side", "--field-manager=ddp-infra-cluster", "-f", "-",
                     input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))

    def _crd_established(self, name: str) -> bool:
        out = self.kubectl("get", "crd", name, "-o", "json", check=False)
        conditions = json.loads(out.stdout).get("status", {}).get("conditions", []) if out.returncode == 0 else []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    def _probe_ok(self, url: str) -> bool:
        probe = f"import urllib.request; urllib.request.urlopen('{url}', timeout=2)"
        return self.in_namespace(sys.executable, "-c", probe, timeout=10).returncode == 0

    def _webhooks_answer(self, addon: ControllerAddOn) -> bool:
        out = self.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(addon.probe), check=False)
        return out.returncode == 0 and addon.probe_answered(json.loads(out.stdout))

    def _node_ready(self) -> bool:
        out = self.kubectl("get", "node", self.node_name, "-o", "json", check=False)
        if out.returncode != 0:
            return False
        conditions = json.loads(out.stdout)["status"].get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _dns_ready(self) -> bool:
        return self._probe_ok(f"http://{NODE_IP}:8181/ready")

    def _default_service_account(self) -> bool:
        return self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description="A local single-node Kubernetes cluster (see the module's docstring).")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("up", "down", "status"):
        p = sub.add_parser(command)
        p.add_argument("--name", default=os.environ.get("DDP_INFRA_CLUSTER", "dev"), help="cluster name (default dev)")
        if command == "up":
            p.add_argument("--without-images", action="store_true", help="import no image (no pod can start)")
            p.add_argument("--domain", default="cluster.local", help="the cluster domain (default cluster.local)")
            p.add_argument("--addon", action="append", default=[], choices=sorted(ADDONS), help="start an add-on with the cluster (repeatable)")
    relay = sub.add_parser("relay", help=argparse.SUPPRESS)
    relay.add_argument("listen_port", type=int)
    relay.add_argument("netns_pid", type=int)
    relay.add_argument("target_port", type=int)
    args = parser.parse_args()
    if args.command == "relay":
        _relay(args.listen_port, args.netns_pid, args.target_port)
        return 0
    cluster = LocalCluster(args.name, with_images=not getattr(args, "without_images", False),
                           domain=getattr(args, "domain", "cluster.local"), addons=getattr(args, "addon", ()))
    if args.command == "up":
        try:
            cluster.start()
        except (ClusterError, FileNotFoundError) as error:
            print(f"[cluster] {args.name} did not start: {error}", file=sys.stderr)
            return 1
        print(f"[cluster] {args.name} ready in {cluster.startup_seconds:.1f} s")
        for name, ref in cluster.images.items():
            print(f"[cluster] image {name}: {ref}")
        print(f"export KUBECONFIG={cluster.kubeconfig}   # context {cluster.context}")
    elif args.command == "down":
        cluster.stop()
        print(f"[cluster] {args.name} stopped; nothing of it is left running")
    else:
        print(json.dumps(cluster.status(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
