"""The torchrun world one pod is in (PodWorld), from what Kubernetes gives the pod: its env and hostname.

Pure: no I/O, no torch. Two schemes are understood:
- the contract scheme (trainer/contract.py), which the Pulumi program emits;
- the injected-variable scheme of seed guide 000 (POD_NAME, SVC_NAME, POD_NUMS, POD_PORT,
  POD_NAMESPACE, JOB_NAME, JOB_COMPLETION_INDEX), for pods this program did not make.
Every problem found is collected, so one error lists all of them.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Mapping

from trainer import contract as c

# The pod's own: the stack derives SHUTDOWN_TIMEOUT from the termination grace period, so without it
# torchrun's own default applies. The other fallbacks are the contract's (trainer/contract.py).
DEFAULT_SHUTDOWN_TIMEOUT = 30

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", re.IGNORECASE)
_RDZV_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ORDINAL_SUFFIX = re.compile(r"^(?P<base>.+)-(?P<ordinal>[0-9]+)$")


@dataclass(frozen=True)
class Problem:
    name: str
    value: str | None  # None: the variable is not set
    allowed: str

    def __str__(self) -> str:
        given = "not set" if self.value is None else f"got {self.value!r}"
        return f"{self.name}: {given}; expected {self.allowed}"


class WorldError(ValueError):
    """The pod's env cannot describe a torchrun world; `problems` lists every reason."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"the pod env does not describe a training world ({len(problems)} problem(s)):\n{lines}")


@dataclass(frozen=True)
class Timeouts:
    join: int
    read: int
    last_call: int
    close: int
    keep_alive: int
    keep_alive_max_attempts: int


@dataclass(frozen=True)
class PodWorld:
    node_rank: int
    nnodes: int  # the most pods: NNODES, or the MAX of an elastic world's MIN:MAX
    nproc_per_node: int
    world_size: int
    master_addr: str
    master_port: int
    rdzv_backend: str
    rdzv_id: str
    rdzv_endpoint: str
    timeouts: Timeouts
    max_restarts: int
    master_wait_timeout: float
    shutdown_timeout: int
    rank_source: str  # where node_rank came from, for the log
    scheme: str  # "contract" or "seed-000"
    run_name: str | None  # the run directory the trainer will use (RUN_NAME), for the log and cross-checks
    min_nodes: int | None = None  # an elastic world's MIN; None: a world of exactly nnodes
    spare_pods: int = 0  # pods beyond nnodes that wait to take a lost pod's place (SPARE_PODS)
    liveness_port: int | None = None  # where the entrypoint answers the kubelet's liveness probe (LIVENESS_PORT)

    @property
    def nnodes_text(self) -> str:
        """torchrun's --nnodes: "4", or an elastic world's "2:4"."""
        return c.range_text(self.min_nodes or self.nnodes, self.nnodes)

    @property
    def world_size_text(self) -> str:
        """WORLD_SIZE as the pod env says it: "8", or an elastic world's "4:8"."""
        return c.range_text((self.min_nodes or self.nnodes) * self.nproc_per_node, self.world_size)

    @property
    def hosts_rendezvous(self) -> bool:
        """Node 0's agent hosts the store where it lives on pod 0 (_store_on_pod_0): node 0 must not wait for itself."""
        return _store_on_pod_0(self.rdzv_backend, self.rdzv_endpoint, self.master_addr, self.master_port) and self.node_rank == 0

    def elastic_rule(self) -> str | None:
        """What an elastic world does with its size, for the pod's log; None for a world of one size."""
        if self.min_nodes is None:
            return None
        return (f"[DDP] elastic world of {self.nnodes_text} pods: it trains once {self.min_nodes} have joined, takes in "
                f"up to {self.nnodes} and re-forms at any size between, resuming at the exact sample; with fewer than "
                f"{self.min_nodes} it waits up to {self.timeouts.join} s ({c.RDZV_JOIN_TIMEOUT.name}), then this pod fails")  # fmt: skip

    def spare_rule(self) -> str | None:
        """What the world's spare pods do, for the pod's log; None without spares."""
        if not self.spare_pods:
            return None
        return (f"[DDP] {self.nnodes} pods train and {self.spare_pods} wait as spares ({c.SPARE_PODS.name}): the first "
                f"{self.nnodes} to join form the world, whichever their index, and a lost pod's place goes to a waiting "
                "one at once; a spare waits for as long as the world trains")  # fmt: skip

    def summary(self) -> str:
        return (
            f"[DDP] pod_index={self.node_rank} nnodes={self.nnodes_text} nproc_per_node={self.nproc_per_node} "
            f"world_size={self.world_size_text} master={self.master_addr}:{self.master_port} "
            f"rdzv={self.rdzv_backend}@{self.rdzv_endpoint} rdzv_id={self.rdzv_id} "
            f"max_restarts={self.max_restarts} rank_from={self.rank_source} run={self.run_name}"
        )


class _Reader:
    """Reads and checks variables, recording each problem instead of stopping at the first."""

    def __init__(self, env: Mapping[str, str]):
        self.env = env
        self.problems: list[Problem] = []

    def text(self, name: str, required: bool = True) -> str | None:
        value = self.env.get(name)
        if value is None or value.strip() == "":
            if required:
                self.problem(name, value, "a non-empty value")
            return None
        return value.strip()

    def integer(self, name: str, minimum: int, required: bool = True, default: int | None = None) -> int | None:
        value = self.text(name, required=required)
        if value is None:
            return default
        try:
            number = int(value, 10)
        except ValueError:
            self.problem(name, value, f"a whole number >= {minimum}")
            return None
        if number < minimum:
            self.problem(name, value, f"a whole number >= {minimum}")
            return None
        return number

    def node_range(self, name: str) -> tuple[int, int | None] | None:
        """(MAX, MIN) of "N" (MIN None: exactly N) or of an elastic world's "MIN:MAX"."""
        value = self.text(name)
        if value is None:
            return None
        parsed = c.parse_range(value)
        if parsed:
            minimum, maximum = parsed
            return maximum, (minimum if minimum < maximum else None)
        self.problem(name, value, "a whole number >= 1, or MIN:MAX with 1 <= MIN < MAX (an elastic world)")
        return None

    def seconds(self, name: str, default: float) -> float:
        value = self.text(name, required=False)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not number > 0:
            self.problem(name, value, "a positive number of seconds")
            return default
        return number

    def port(self, name: str, required: bool = True) -> int | None:
        value = self.integer(name, minimum=1, required=required)
        if value is not None and value > 65535:
            self.problem(name, str(value), "a TCP port, 1..65535")
            return None
        return value

    def host(self, name: str, value: str | None) -> str | None:
        if value is None:
            return None
        if not is_valid_host(value):
            self.problem(name, value, "a DNS name (RFC 1123 labels) or an IP address")
            return None
        return value

    def choice(self, name: str, allowed: tuple[str, ...], required: bool = True) -> str | None:
        value = self.text(name, required=required)
        if value is not None and value not in allowed:
            self.problem(name, value, f"one of {', '.join(allowed)}")
            return None
        return value

    def problem(self, name: str, value: str | None, allowed: str) -> None:
        # the first problem of a variable is the one to fix; later checks of it would repeat it
        if all(p.name != name for p in self.problems):
            self.problems.append(Problem(name, value, allowed))


def is_valid_host(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        pass
    labels = value.rstrip(".").split(".")
    return len(value) <= 253 and all(_DNS_LABEL.match(label) and len(label) <= 63 for label in labels)


def ordinal_of(name: str | None) -> tuple[str, int] | None:
    """`train-llm-3` -> ("train-llm", 3): the StatefulSet / Indexed Job pod-name convention."""
    if not name:
        return None
    match = _ORDINAL_SUFFIX.match(name)
    return (match["base"], int(match["ordinal"])) if match else None


def parse_endpoint(value: str) -> tuple[str, int] | None:
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")  # [::1]:29500
    if not sep or not port.isdigit() or not 0 < int(port) <= 65535 or not is_valid_host(host):
        return None
    return host, int(port)


def resolve_world(env: Mapping[str, str], hostname: str) -> PodWorld:
    """The world this pod belongs to, from its env and hostname alone; raises WorldError."""
    if c.NNODES.name not in env and c.LEGACY_POD_NUMS in env:
        return _resolve_seed000(env, hostname)
    return _resolve_contract(env, hostname)


def _resolve_contract(env: Mapping[str, str], hostname: str) -> PodWorld:
    r = _Reader(env)
    for name in c.REQUIRED:
        r.text(name)
    nnodes, min_nodes = r.node_range(c.NNODES.name) or (None, None)
    nproc = r.integer(c.NPROC_PER_NODE.name, 1)
    world_size = _world_size(r, nnodes, min_nodes, nproc)
    master_addr = r.host(c.MASTER_ADDR.name, r.text(c.MASTER_ADDR.name))
    master_port = r.port(c.MASTER_PORT.name)
    backend = r.choice(c.RDZV_BACKEND.name, c.RDZV_BACKENDS)
    rdzv_id = _rdzv_id(r, r.text(c.RDZV_ID.name))
    r.choice(c.WORKLOAD_KIND.name, c.WORKLOAD_KINDS)
    kind = env.get(c.WORKLOAD_KIND.name, "").strip()
    node_rank, rank_source = _node_rank(r, kind, hostname)
    spares = r.integer(c.SPARE_PODS.name, 0, required=False, default=0) or 0
    if node_rank is not None and nnodes and node_rank >= nnodes + spares:
        below = f"{c.NNODES.name}={nnodes}" if not spares else f"{c.NNODES.name} + {c.SPARE_PODS.name} = {nnodes + spares}"
        r.problem(rank_source, str(node_rank), f"a node rank below {below}")
    endpoint = _endpoint(r, master_addr, master_port)
    timeouts = _timeouts(r)
    max_restarts = r.integer(c.MAX_RESTARTS.name, 0)
    wait = r.seconds(c.MASTER_WAIT_TIMEOUT.name, float(c.MASTER_WAIT_TIMEOUT_SECONDS))
    shutdown = r.integer(c.SHUTDOWN_TIMEOUT.name, 0, required=False, default=DEFAULT_SHUTDOWN_TIMEOUT)
    liveness_port = r.port(c.LIVENESS_PORT.name, required=False)
    # read by the training processes (trainer/hang_watch.py): checked here, before torchrun starts them
    r.integer(c.HANG_TIMEOUT_FLOOR.name, 1, required=False)
    r.integer(c.HANG_TIMEOUT_CEILING.name, 0, required=False)
    _check_mirrors(r, env, endpoint)
    if min_nodes is not None or spares:
        _check_rendezvous_apart(r, backend, endpoint, master_addr, master_port, elastic=min_nodes is not None)
    if r.problems:
        raise WorldError(r.problems)
    return PodWorld(
        node_rank=node_rank, nnodes=nnodes, nproc_per_node=nproc, world_size=world_size,
        master_addr=master_addr, master_port=master_port, rdzv_backend=backend, rdzv_id=rdzv_id,
        rdzv_endpoint=endpoint, timeouts=timeouts, max_restarts=max_restarts, master_wait_timeout=wait,
        shutdown_timeout=shutdown, rank_source=rank_source, scheme="contract", run_name=env.get(c.RUN_NAME.name),
        min_nodes=min_nodes, spare_pods=spares, liveness_port=liveness_port,
    )  # fmt: skip


def _timeouts(r: _Reader) -> Timeouts:
    """The rendezvous's timeouts and heartbeat: each optional one unset is the contract's default.

    RDZV_JOIN_TIMEOUT is required: a pod without it fails with the other problems, before its
    world is used.
    """

    def optional(var: c.EnvVar, default: int, minimum: int = 1) -> int:
        return r.integer(var.name, minimum, required=False, default=default)

    return Timeouts(
        join=r.integer(c.RDZV_JOIN_TIMEOUT.name, 1),
        read=optional(c.RDZV_READ_TIMEOUT, c.READ_TIMEOUT_SECONDS),
        last_call=optional(c.RDZV_LAST_CALL_TIMEOUT, c.LAST_CALL_TIMEOUT_SECONDS),
        close=optional(c.RDZV_CLOSE_TIMEOUT, c.CLOSE_TIMEOUT_SECONDS),
        keep_alive=optional(c.RDZV_KEEP_ALIVE_INTERVAL, c.KEEP_ALIVE_INTERVAL_SECONDS),
        keep_alive_max_attempts=optional(c.RDZV_KEEP_ALIVE_MAX_ATTEMPTS, c.KEEP_ALIVE_MAX_ATTEMPTS, c.KEEP_ALIVE_MIN_ATTEMPTS),
    )


def _world_size(r: _Reader, nnodes: int | None, min_nodes: int | None, nproc: int | None) -> int | None:
    """WORLD_SIZE, which must be NNODES x NPROC_PER_NODE (an elastic world's: MIN x n:MAX x n)."""
    text = r.text(c.WORLD_SIZE.name)
    if text is None or not (nnodes and nproc):
        return None
    fewest = min_nodes or nnodes
    expected = c.range_text(fewest * nproc, nnodes * nproc)
    if text != expected:
        shape = c.range_text(fewest, nnodes)
        r.problem(c.WORLD_SIZE.name, text, f"{c.NNODES.name} x {c.NPROC_PER_NODE.name} = {shape} x {nproc} = {expected}")
        return None
    return nnodes * nproc


def _check_rendezvous_apart(
    r: _Reader, backend: str | None, endpoint: str | None, master_addr: str | None, master_port: int | None, elastic: bool
) -> None:
    """An elastic world, or one with spares, forms from any of its pods: its rendezvous cannot live on pod 0."""
    if _store_on_pod_0(backend, endpoint, master_addr, master_port):
        why = f"{c.NNODES.name} a range (an elastic world)" if elastic else f"{c.SPARE_PODS.name} set"
        r.problem(
            c.RDZV_BACKEND.name if backend == "static" else c.RDZV_ENDPOINT.name, backend if backend == "static" else endpoint,
            f"with {why}, a c10d store apart from pod 0 or etcd-v2 (a world of any of its pods must be able to form)",
        )


def _store_on_pod_0(backend: str | None, endpoint: str | None, master_addr: str | None, master_port: int | None) -> bool:
    """The contract's store_on_pod_0, where a store apart is an endpoint other than node 0's address."""
    return c.store_on_pod_0(backend, apart=endpoint != f"{master_addr}:{master_port}")


def _rdzv_id(r: _Reader, value: str | None) -> str | None:
    if value is not None and not _RDZV_ID.match(value):
        r.problem(c.RDZV_ID.name, value, "letters, digits, '.', '_' or '-' (it names the rendezvous)")
        return None
    return value


def _node_rank(r: _Reader, kind: str, hostname: str) -> tuple[int | None, str]:
    """The pod's index: NODE_RANK if set, else the completion index (Job, JobSet), else the name's ordinal.

    A StatefulSet pod's name is its hostname (`<sts>-<ordinal>`); an Indexed Job pod's name has a
    random suffix but its hostname is `<job>-<index>` (under JobSet, `<jobset>-<replicated job>-
    <job index>-<index>`), so the hostname's last number is the last resort for all of them.
    """
    explicit = r.text(c.NODE_RANK.name, required=False)
    index = r.text(c.JOB_COMPLETION_INDEX, required=False)
    if explicit is not None:
        rank = r.integer(c.NODE_RANK.name, 0, required=False)
        if rank is not None and index is not None and index != str(rank):
            r.problem(c.NODE_RANK.name, explicit, f"the same index as {c.JOB_COMPLETION_INDEX}={index}")
        return rank, c.NODE_RANK.name
    if kind in (c.INDEXED_JOB, c.JOBSET) and index is not None:
        return r.integer(c.JOB_COMPLETION_INDEX, 0, required=False), c.JOB_COMPLETION_INDEX
    pod_name = r.text(c.POD_NAME.name, required=False)
    candidates = ([(c.POD_NAME.name, pod_name)] if kind == c.STATEFULSET else []) + [("hostname", hostname)]
    for source, name in candidates:
        parsed = ordinal_of(name)
        if parsed is not None:
            return parsed[1], f"{source} {name}"
    r.problem(
        c.NODE_RANK.name,
        explicit,
        f"a node rank: set it from the {c.POD_INDEX_LABEL} label or {c.JOB_COMPLETION_INDEX}, "
        f"or run in a pod named <workload>-<ordinal> (hostname {hostname!r} has no ordinal)",
    )
    return None, c.NODE_RANK.name


def _endpoint(r: _Reader, master_addr: str | None, master_port: int | None) -> str | None:
    explicit = r.text(c.RDZV_ENDPOINT.name, required=False)
    if explicit is not None:
        if parse_endpoint(explicit) is None:
            r.problem(c.RDZV_ENDPOINT.name, explicit, "host:port")
            return None
        return explicit
    if master_addr is None or master_port is None:
        return None
    return f"{master_addr}:{master_port}"


def _check_mirrors(r: _Reader, env: Mapping[str, str], endpoint: str | None) -> None:
    """torchrun reads PET_<FLAG> as its defaults: a stale mirror would silently change the world."""
    for mirror, original in c.PET_MIRRORS.items():
        if mirror in env and env[mirror].strip() != env.get(original, "").strip():
            r.problem(mirror, env[mirror], f"the same value as {original}={env.get(original, '')!r}")
    pet_endpoint = env.get(c.PET_RDZV_ENDPOINT.name)
    if pet_endpoint is not None and pet_endpoint.strip() and endpoint and pet_endpoint.strip() != endpoint:
        r.problem(c.PET_RDZV_ENDPOINT.name, pet_endpoint, f"the rendezvous endpoint {endpoint!r}")


def _resolve_seed000(env: Mapping[str, str], hostname: str) -> PodWorld:
    """Seed 000's platform: pod 0 of `<JOB_NAME or POD_NAME minus ordinal>` behind SVC_NAME is the master."""
    r = _Reader(env)
    nnodes = r.integer(c.LEGACY_POD_NUMS, 1)
    port = r.port(c.LEGACY_POD_PORT)
    pod_name = r.text(c.POD_NAME.name)
    service = r.text(c.SVC_NAME.name)
    namespace = r.text(c.POD_NAMESPACE.name)
    nproc = r.integer(c.NPROC_PER_NODE.name, 1, required=False, default=1)
    job_name = r.text(c.LEGACY_JOB_NAME, required=False)
    index = r.text(c.JOB_COMPLETION_INDEX, required=False)
    parsed = ordinal_of(pod_name)
    if index is not None:
        node_rank, source = r.integer(c.JOB_COMPLETION_INDEX, 0, required=False), c.JOB_COMPLETION_INDEX
    elif parsed is not None:
        node_rank, source = parsed[1], f"{c.POD_NAME.name} {pod_name}"
    else:
        node_rank, source = None, c.POD_NAME.name
        if pod_name is not None:
            r.problem(c.POD_NAME.name, pod_name, f"<workload>-<ordinal>, or set {c.JOB_COMPLETION_INDEX}")
    workload = job_name or (parsed[0] if parsed else None)
    if workload is None and pod_name is not None and job_name is None:
        r.problem(c.LEGACY_JOB_NAME, None, f"the Job name, since {c.POD_NAME.name} has no ordinal")
    if node_rank is not None and nnodes and node_rank >= nnodes:
        r.problem(source, str(node_rank), f"a node rank below {c.LEGACY_POD_NUMS}={nnodes}")
    master = None
    if workload and service:
        master = r.host(c.POD_NAME.name, c.master_dns_name(workload, service))
    wait = r.seconds(c.MASTER_WAIT_TIMEOUT.name, float(c.MASTER_WAIT_TIMEOUT_SECONDS))
    shutdown = r.integer(c.SHUTDOWN_TIMEOUT.name, 0, required=False, default=DEFAULT_SHUTDOWN_TIMEOUT)
    if r.problems:
        raise WorldError(r.problems)
    rdzv_id = re.sub(r"[^A-Za-z0-9._-]", "-", f"{namespace}-{workload}")
    return PodWorld(
        node_rank=node_rank, nnodes=nnodes, nproc_per_node=nproc, world_size=nnodes * nproc,
        master_addr=master, master_port=port, rdzv_backend="c10d", rdzv_id=rdzv_id,
        rdzv_endpoint=f"{master}:{port}",
        timeouts=Timeouts(
            c.SEED_000_JOIN_TIMEOUT_SECONDS, c.READ_TIMEOUT_SECONDS, c.LAST_CALL_TIMEOUT_SECONDS, c.CLOSE_TIMEOUT_SECONDS,
            c.KEEP_ALIVE_INTERVAL_SECONDS, c.KEEP_ALIVE_MAX_ATTEMPTS,
        ),
        max_restarts=c.WORLD_MAX_RESTARTS, master_wait_timeout=wait, shutdown_timeout=shutdown,
        rank_source=source, scheme="seed-000", run_name=env.get(c.RUN_NAME.name),
    )  # fmt: skip
