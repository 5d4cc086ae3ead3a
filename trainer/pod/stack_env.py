"""The env this program gives its pods (the contract, trainer/contract.py): the world it describes.

The Pulumi program writes every variable (ddp_infra/pod.py); the pod checks each of them here
before torchrun starts, so that a pod whose env cannot form the world fails with all its problems.
Pure: no I/O, no torch.
"""

from __future__ import annotations

import re
from typing import Mapping

from trainer import contract as c
from trainer.pod.env_reader import DEFAULT_SHUTDOWN_TIMEOUT, EnvReader, WorldError, ordinal_of, parse_endpoint
from trainer.pod.pod_world import STACK_SCHEME, PodWorld, Timeouts, store_on_pod_0

_RDZV_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def world_from_stack_env(env: Mapping[str, str], hostname: str) -> PodWorld:
    r = EnvReader(env)
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
        shutdown_timeout=shutdown, rank_source=rank_source, scheme=STACK_SCHEME, run_name=env.get(c.RUN_NAME.name),
        min_nodes=min_nodes, spare_pods=spares, liveness_port=liveness_port,
    )  # fmt: skip


def _timeouts(r: EnvReader) -> Timeouts:
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


def _world_size(r: EnvReader, nnodes: int | None, min_nodes: int | None, nproc: int | None) -> int | None:
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
    r: EnvReader, backend: str | None, endpoint: str | None, master_addr: str | None, master_port: int | None, elastic: bool
) -> None:
    """An elastic world, or one with spares, forms from any of its pods: its rendezvous cannot live on pod 0."""
    if store_on_pod_0(backend, endpoint, master_addr, master_port):
        why = f"{c.NNODES.name} a range (an elastic world)" if elastic else f"{c.SPARE_PODS.name} set"
        r.problem(
            c.RDZV_BACKEND.name if backend == "static" else c.RDZV_ENDPOINT.name, backend if backend == "static" else endpoint,
            f"with {why}, a c10d store apart from pod 0 or etcd-v2 (a world of any of its pods must be able to form)",
        )


def _rdzv_id(r: EnvReader, value: str | None) -> str | None:
    if value is not None and not _RDZV_ID.match(value):
        r.problem(c.RDZV_ID.name, value, "letters, digits, '.', '_' or '-' (it names the rendezvous)")
        return None
    return value


def _node_rank(r: EnvReader, kind: str, hostname: str) -> tuple[int | None, str]:
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


def _endpoint(r: EnvReader, master_addr: str | None, master_port: int | None) -> str | None:
    explicit = r.text(c.RDZV_ENDPOINT.name, required=False)
    if explicit is not None:
        if parse_endpoint(explicit) is None:
            r.problem(c.RDZV_ENDPOINT.name, explicit, "host:port")
            return None
        return explicit
    if master_addr is None or master_port is None:
        return None
    return f"{master_addr}:{master_port}"


def _check_mirrors(r: EnvReader, env: Mapping[str, str], endpoint: str | None) -> None:
    """torchrun reads PET_<FLAG> as its defaults: a stale mirror would silently change the world."""
    for mirror, original in c.PET_MIRRORS.items():
        if mirror in env and env[mirror].strip() != env.get(original, "").strip():
            r.problem(mirror, env[mirror], f"the same value as {original}={env.get(original, '')!r}")
    pet_endpoint = env.get(c.PET_RDZV_ENDPOINT.name)
    if pet_endpoint is not None and pet_endpoint.strip() and endpoint and pet_endpoint.strip() != endpoint:
        r.problem(c.PET_RDZV_ENDPOINT.name, pet_endpoint, f"the rendezvous endpoint {endpoint!r}")
