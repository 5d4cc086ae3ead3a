"""The variables a platform injects into a pod this program did not make, as seed guide 000 names them.

POD_NAME, SVC_NAME, POD_NUMS (the number of pods), POD_PORT (the master's port), POD_NAMESPACE, and
JOB_NAME or JOB_COMPLETION_INDEX for a Job: enough for a plain torchrun world, whose master is pod 0
behind SVC_NAME. Everything else takes torchrun's and the contract's defaults. Pure: no I/O, no torch.
"""

from __future__ import annotations

import re
from typing import Mapping

from trainer import contract as c
from trainer.pod.env_reader import DEFAULT_SHUTDOWN_TIMEOUT, EnvReader, WorldError, ordinal_of
from trainer.pod.pod_world import PLATFORM_SCHEME, PodWorld, Timeouts


def world_from_platform_env(env: Mapping[str, str], hostname: str) -> PodWorld:
    """The platform's world: pod 0 of `<JOB_NAME or POD_NAME minus ordinal>` behind SVC_NAME is the master."""
    r = EnvReader(env)
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
        rank_source=source, scheme=PLATFORM_SCHEME, run_name=env.get(c.RUN_NAME.name),
    )  # fmt: skip
