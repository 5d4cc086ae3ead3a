"""Checks run before torchrun starts: the master is reachable, the network and /dev/shm are usable,
the GPUs and the InfiniBand devices the pod asked for are there.

Each check returns a Check that says what was looked at and, when it is not ok, what to do next.
Standard library only: it runs before torch is imported.
"""

from __future__ import annotations

import fcntl
import math
import os
import re
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from trainer import contract as c
from trainer.pod.env_reader import parse_endpoint
from trainer.pod.pod_world import PodWorld

OK, WARN, FAIL = "ok", "warn", "FAIL"
MIN_SHM_BYTES = 1 << 30  # DataLoader workers and NCCL's intra-node transport both live in /dev/shm
DOCKER_DEFAULT_SHM_BYTES = 64 << 20
_SIOCGIFADDR = 0x8915
STILL_WAITING_EVERY_S = 30.0


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str
    advice: str = ""

    def line(self) -> str:
        text = f"[PREFLIGHT] {self.status:<4} {self.name}: {self.detail}"
        return text + (f"\n[PREFLIGHT]      next: {self.advice}" if self.advice else "")


def wait_for_endpoint(
    host: str,
    port: int,
    deadline_s: float,
    log: Callable[[str], None] = print,
    first_delay_s: float = 0.5,
    max_delay_s: float = 1.0,
    connect_timeout_s: float = 1.0,
) -> Check:
    """Wait until `host` resolves and `host:port` accepts a TCP connection, with backoff.

    A DNS answer alone is not enough: a headless Service publishes the name before the process
    behind it listens, and joining then fails with "connection refused". The backoff stops at a
    second: a pod re-joining after pod 0's loss waits here for the new pod 0, and every second it
    looks too late is a second the whole world does not train (one lookup and one SYN a second
    per waiting pod). A connection gets a second too: within a cluster a listening pod answers in
    milliseconds, and a lost pod's address, which its name can still give, answers never.
    """
    name = f"reach {host}:{port}"
    start = time.monotonic()
    delay = first_delay_s
    attempt = 0
    last_error, last_logged = "", -math.inf
    while True:
        attempt += 1
        stage, error = _probe(host, port, connect_timeout_s)
        elapsed = time.monotonic() - start
        if error is None:
            return Check(name, OK, f"DNS answered and the port accepted after {attempt} attempt(s), {elapsed:.0f} s")
        # a new error at once, the same one now and then: a long wait must not look like a hang
        if error != last_error or elapsed - last_logged >= STILL_WAITING_EVERY_S:
            log(f"[PREFLIGHT] waiting for {host}:{port}: {stage} failed ({error}); "
                f"{elapsed:.0f} s of {deadline_s:g} s")  # fmt: skip
            last_error, last_logged = error, elapsed
        left = deadline_s - elapsed
        if left <= 0:
            return Check(name, FAIL, f"{stage} still failing after {attempt} attempt(s) in {deadline_s:g} s: {error}",
                         _advice_for(stage, host, port))  # fmt: skip
        time.sleep(min(delay, left))
        delay = min(delay * 2, max_delay_s)


def _probe(host: str, port: int, timeout_s: float) -> tuple[str, str | None]:
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return "DNS lookup", str(exc)
    error = "no address"
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as sock:
            sock.settimeout(timeout_s)
            try:
                sock.connect(address)
                return "TCP connect", None
            except OSError as exc:
                error = f"{address[0]}: {exc.strerror or exc}"
    return "TCP connect", error


def search_domains(resolv_conf: str = "/etc/resolv.conf") -> list[str]:
    """The domains the resolver appends to a short name (the pod's namespace and cluster domain)."""
    try:
        lines = open(resolv_conf).read().splitlines()
    except OSError:
        return []
    found: list[str] = []
    for line in lines:
        words = line.split()
        if words and words[0] in ("search", "domain"):
            found = words[1:]
    return found


def _advice_for(stage: str, host: str, port: int) -> str:
    if stage == "DNS lookup":
        tried = ", ".join(f"{host}.{domain}" for domain in search_domains()) or "no search domain in /etc/resolv.conf"
        return (
            f"check that pod 0 exists and that the headless Service publishes not-ready addresses "
            f"(names tried through the search path: {tried}); `getent hosts {host}` inside a pod should answer. "
            f"Raise {c.MASTER_WAIT_TIMEOUT.name} if pods start slowly"
        )
    return (
        f"pod 0 resolves but does not listen on {port}: look at pod 0's log (did its entrypoint fail?), "
        f"and check that {c.MASTER_PORT.name} matches the Service port and no NetworkPolicy blocks it"
    )


def local_address_towards(host: str, port: int) -> str | None:
    """This pod's address on the route to `host` (a UDP connect sends no packet)."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            return probe.getsockname()[0]
    except OSError:
        return None


def own_address(host: str, port: int, service: str | None = None) -> tuple[Check, str | None]:
    """The address torchrun advertises for this node.

    torchrun's c10d rendezvous numbers the nodes in the order of these addresses, so global rank 0
    (the process that logs, checkpoints and writes outputs) runs on whichever sorts first. A pod
    of the world advertises its own name under the headless Service, `<pod>.<service>`: pod 0's
    (`<workload>-0.`) sorts before every other pod's, so rank 0 is always in pod 0, and it is the
    name the other pods already resolved as the master. The kubelet writes that name into the
    pod's /etc/hosts when the pod has the Service as its subdomain. Elsewhere (no subdomain, a
    test on loopback) the address that routes to the master, whose order is arbitrary.
    """
    if service:
        name = f"{socket.gethostname()}.{service}"
        if socket.getfqdn().startswith(f"{name}."):
            return Check("local address", OK, f"{name} (this pod under the Service; pod 0 sorts first, so rank 0 runs there)"), name
    address = local_address_towards(host, port)
    source = f"the route to {host}"
    if address is None:  # pod 0's own DNS record may not be published yet; /etc/hosts has the pod IP
        try:
            address, source = socket.gethostbyname(socket.gethostname()), "/etc/hosts"
        except OSError:
            return Check("local address", WARN, "neither a route to the master nor /etc/hosts gives this pod's address",
                         "torchrun falls back to the FQDN; give the pods a subdomain (the headless Service)"), None  # fmt: skip
    return Check("local address", OK, f"{address} (from {source})"), address


def interface_towards(host: str, port: int) -> str | None:
    """The name of the interface the kernel would use to reach `host`."""
    local_ip = local_address_towards(host, port)
    if local_ip is None:
        return None
    return next((name for name, ip in interface_addresses().items() if ip == local_ip), None)


def interface_addresses() -> dict[str, str]:
    """IPv4 address of each interface that has one (the stdlib has no getifaddrs)."""
    found = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                reply = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, request)
            except OSError:
                continue
            found[name] = socket.inet_ntoa(reply[20:24])
    return found


def choose_interface(env: Mapping[str, str], host: str, port: int) -> tuple[Check, dict[str, str]]:
    """Pick NCCL's and Gloo's interface (the route to the master) unless the pod env set one."""
    preset = {v.name: env[v.name] for v in (c.NCCL_SOCKET_IFNAME, c.GLOO_SOCKET_IFNAME) if env.get(v.name)}
    if len(preset) == 2:
        return Check("network interface", OK, f"set by the pod env: {preset}"), {}
    chosen = interface_towards(host, port)
    if chosen is None:
        return (
            Check("network interface", WARN, f"no route found towards {host}; NCCL and Gloo will guess",
                  f"set {c.NCCL_SOCKET_IFNAME.name} and {c.GLOO_SOCKET_IFNAME.name} (e.g. eth0) in the pod env"),
            {},
        )  # fmt: skip
    settings = {name: chosen for name in (c.NCCL_SOCKET_IFNAME.name, c.GLOO_SOCKET_IFNAME.name) if name not in preset}
    return Check("network interface", OK, f"{chosen} routes to {host}; set {', '.join(sorted(settings))}={chosen}"), settings


def check_shm(path: str = c.SHM_MOUNT, minimum: int = MIN_SHM_BYTES, expected: int | None = None) -> Check:
    try:
        stats = os.statvfs(path)
    except OSError as exc:
        return Check("shared memory", FAIL, f"cannot stat {path}: {exc}", "mount an emptyDir with medium: Memory there")
    size = stats.f_frsize * stats.f_blocks
    detail = f"{path} is {_mib(size)}"
    if expected is not None and size < expected:
        return Check("shared memory", WARN, f"{detail}, less than {c.SHM_SIZE_BYTES.name}={_mib(expected)}",
                     "the memory emptyDir's sizeLimit or the node's memory caps it; lower the shm size or use bigger nodes")  # fmt: skip
    if size < minimum:
        hint = " (the container runtime's 64 MiB default)" if size <= DOCKER_DEFAULT_SHM_BYTES else ""
        return Check("shared memory", WARN, f"{detail}{hint}, below {_mib(minimum)}: DataLoader workers and NCCL may die with bus errors",
                     f"mount an emptyDir with medium: Memory at {path}")  # fmt: skip
    return Check("shared memory", OK, detail)


def visible_gpus(dev_dir: str = "/dev", env: Mapping[str, str] = os.environ) -> int:
    """GPUs this container can use: the NVIDIA device nodes it was given, narrowed by CUDA_VISIBLE_DEVICES."""
    count = sum(1 for entry in Path(dev_dir).glob("nvidia*") if re.fullmatch(r"nvidia[0-9]+", entry.name))
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"]))
    return count


def check_gpus(gpus_per_node: int | None, nproc_per_node: int, dev_dir: str = "/dev", env: Mapping[str, str] = os.environ) -> Check:
    seen = visible_gpus(dev_dir, env)
    if gpus_per_node is None:
        return Check("GPUs", OK, f"{seen} visible; {c.GPUS_PER_NODE.name} not set, so nothing to compare with")
    if gpus_per_node == 0:
        return Check("GPUs", OK, f"CPU pod ({c.GPUS_PER_NODE.name}=0); {seen} visible; training uses gloo")
    if seen < gpus_per_node:
        return Check("GPUs", FAIL, f"{c.GPUS_PER_NODE.name}={gpus_per_node} but {seen} NVIDIA device(s) visible",
                     "check the nvidia.com/gpu limit, the NVIDIA device plugin and the runtime class on this node")  # fmt: skip
    if nproc_per_node > seen:
        return Check("GPUs", FAIL, f"{c.NPROC_PER_NODE.name}={nproc_per_node} processes for {seen} GPU(s)",
                     f"set {c.NPROC_PER_NODE.name} to at most the GPUs per pod")  # fmt: skip
    return Check("GPUs", OK, f"{seen} visible for {nproc_per_node} process(es)")


def check_infiniband(env: Mapping[str, str], dev_dir: str = c.INFINIBAND_DEVICES) -> Check:
    """When the pod env asks for InfiniBand, its verbs devices must be there: without them NCCL
    falls back to sockets, silently under NCCL_DEBUG=WARN, and runs many times slower."""
    if env.get(c.NCCL_IB_DISABLE.name) != "0":
        return Check("InfiniBand", OK, f"not asked for ({c.NCCL_IB_DISABLE.name}={env.get(c.NCCL_IB_DISABLE.name, '(unset)')})")
    asked = f"{c.NCCL_IB_DISABLE.name}=0 asks for InfiniBand"
    advice = (
        "the pod got no RDMA device: check that the stack requests the RDMA device plugin's resource "
        "(network.rdmaResources, e.g. rdma/hca_shared_devices_a: 1) and that the plugin runs on this node "
        "(`kubectl describe node` lists the resource under Allocatable); "
        "or set network.infiniband: false to train over sockets"
    )
    path = Path(dev_dir)
    if not path.is_dir():
        return Check("InfiniBand", FAIL, f"{asked} but {dev_dir} is missing", advice)
    verbs = sorted(entry.name for entry in path.iterdir() if re.fullmatch(r"uverbs[0-9]+", entry.name))
    if not verbs:
        return Check("InfiniBand", FAIL, f"{asked} but {dev_dir} has no uverbs device", advice)
    hca = env.get(c.NCCL_IB_HCA.name)
    return Check("InfiniBand", OK, f"{dev_dir}: {', '.join(verbs)}" + (f"; {c.NCCL_IB_HCA.name}={hca}" if hca else ""))


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.0f} MiB"


@dataclass(frozen=True)
class Preflight:
    checks: list[Check]
    env: dict[str, str]  # settings chosen for torchrun's env (network interfaces)
    local_addr: str | None  # what torchrun should advertise for this node

    @property
    def failed(self) -> list[str]:
        return [check.name for check in self.checks if check.status == FAIL]


def preflight(world: PodWorld, env: Mapping[str, str], wait_s: float, log: Callable[[str], None] = print) -> Preflight:
    """All checks for this pod, and what they chose for torchrun."""
    host, port = parse_endpoint(world.rdzv_endpoint)
    checks = []
    if world.hosts_rendezvous:
        checks.append(Check(f"reach {host}:{port}", OK, "this pod hosts the rendezvous store: nothing to wait for"))
    else:
        checks.append(wait_for_endpoint(host, port, wait_s, log=log))
    address_check, local_addr = own_address(world.master_addr, world.master_port, env.get(c.SVC_NAME.name))
    interface, settings = choose_interface(env, world.master_addr, world.master_port)
    checks += [address_check, interface]
    checks.append(check_shm(expected=_optional_int(env.get(c.SHM_SIZE_BYTES.name))))
    checks.append(check_gpus(_optional_int(env.get(c.GPUS_PER_NODE.name)), world.nproc_per_node, env=env))
    checks.append(check_infiniband(env))
    return Preflight(checks, settings, local_addr)


def _optional_int(value: str | None) -> int | None:
    return int(value) if value and value.strip().isdigit() else None
