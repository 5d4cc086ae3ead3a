# One module, past 350 lines, on purpose: every part of the one pod template (env, container, volumes,
# placement) is built here, each beside the place where the escape hatch (`pod.*`) reaches it.
"""The trainer pod, as plain Kubernetes dicts: its env, its container, and its template, built once.

Pure functions of the `World` (which carries the config): no Pulumi here, so they can be tested
and fed to the trainer's own env resolution directly. The one template, built once by the program,
is handed to the fit check, the namespace's Pod Security level, the workload of any kind and
Volcano's PodGroup. The rendezvous store's own pod (ddp_infra/rendezvous_store.py) is built from
the same parts: the shared pod spec, the training image, the security contexts, the placement.

The escape hatch (`pod.*`) is placed where each part is built: the runtime class, the extra
volumes and the trainer's extra mounts, the init containers and then the sidecars (native
sidecars: init containers with `restartPolicy: Always`, which a Job's completion does not wait
for), the root filesystem's read-only switch. Only `pod.templatePatch` is applied to the finished
template (ddp_infra/strategic_merge.py). An extra container gets the trainer's no-escalation,
drop-ALL security context unless it sets those fields itself, so that the pods keep the
restricted Pod Security level by default.
"""

from __future__ import annotations

import copy
from typing import Any

from trainer import contract

from . import gang
from .config import StackConfig, parse_quantity
from .names import (
    CLAIM_MOUNTS, CONTAINER_NAME, FETCH_CONTAINER_NAME, GPU_RESOURCE, HF_TOKEN_SECRET_KEY, LIVENESS_PORT_NAME, PROGRAM_ENV, RENDEZVOUS_PORT_NAME,
    SECONDARY_NETWORKS_ANNOTATION, SHM_VOLUME, TMP_VOLUME,
)  # fmt: skip
from .strategic_merge import strategic_merge
from .world import World

# Where a pod's own index comes from, per workload kind (the downward API reads it).
NODE_RANK_FIELD = {
    contract.STATEFULSET: f"metadata.labels['{contract.POD_INDEX_LABEL}']",
    contract.INDEXED_JOB: f"metadata.annotations['{contract.JOB_COMPLETION_INDEX_ANNOTATION}']",
    contract.JOBSET: f"metadata.annotations['{contract.JOB_COMPLETION_INDEX_ANNOTATION}']",
}


def _field_ref(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


def _flag(on: bool) -> str:
    return "1" if on else "0"


def shutdown_timeout(grace_period_seconds: int) -> int:
    """torchrun's --shutdown-timeout for a pod's termination grace period.

    The workers checkpoint on SIGTERM for as long as torchrun lets them (its default: 30 s,
    whatever the grace period). They get the grace period less a margin for torchrun and the
    process group to wind down before the kubelet's SIGKILL: a quarter of it, at most 10 s.
    """
    return grace_period_seconds - min(10, grace_period_seconds // 4)


# The contract's variables that only some stacks set.
_OPTIONAL_ENV = frozenset(
    var.name
    for var in (
        contract.SPARE_PODS, contract.MODELS_DIR, contract.NCCL_SOCKET_IFNAME, contract.GLOO_SOCKET_IFNAME,
        contract.HF_TOKEN, contract.HUGGINGFACE_HUB_TOKEN,
    )
)


def pod_env(world: World) -> list[dict[str, Any]]:
    """The trainer container's env: the variables every pod has in the order of `contract.ALL`,
    HOME, OMP_NUM_THREADS (unless the user's env sets it), the optional ones (also in that order), the secret env, then the extra env.

    Every value comes from `world`, so NNODES, WORLD_SIZE, MASTER_ADDR and their
    torchrun PET_* mirrors cannot disagree. A mirror of a downward-API variable is written as
    a Kubernetes dependent variable, `$(NODE_RANK)`, which resolves because the mirrored
    variable comes earlier in the list.
    """
    config = world.config
    rdzv = config.rendezvous
    endpoint = world.rdzv_endpoint
    sources: dict[str, dict[str, Any]] = {
        contract.NNODES.name: {"value": world.nnodes_text},
        contract.NPROC_PER_NODE.name: {"value": str(world.nproc_per_node)},
        contract.WORLD_SIZE.name: {"value": world.world_size_text},
        contract.NODE_RANK.name: _field_ref(NODE_RANK_FIELD[world.workload_kind]),
        contract.MASTER_ADDR.name: {"value": world.master_addr},
        contract.MASTER_PORT.name: {"value": str(world.rendezvous_port)},
        contract.RDZV_BACKEND.name: {"value": rdzv.backend},
        contract.RDZV_ID.name: {"value": world.rdzv_id},
        contract.RDZV_ENDPOINT.name: {"value": endpoint},
        contract.RDZV_JOIN_TIMEOUT.name: {"value": str(rdzv.join_timeout_seconds)},
        contract.RDZV_READ_TIMEOUT.name: {"value": str(rdzv.read_timeout_seconds)},
        contract.RDZV_LAST_CALL_TIMEOUT.name: {"value": str(rdzv.last_call_timeout_seconds)},
        contract.RDZV_CLOSE_TIMEOUT.name: {"value": str(rdzv.close_timeout_seconds)},
        contract.RDZV_KEEP_ALIVE_INTERVAL.name: {"value": str(rdzv.keep_alive_interval_seconds)},
        contract.MAX_RESTARTS.name: {"value": str(rdzv.max_restarts)},
        contract.MASTER_WAIT_TIMEOUT.name: {"value": str(rdzv.master_wait_timeout_seconds)},
        contract.SHUTDOWN_TIMEOUT.name: {"value": str(shutdown_timeout(config.workload.termination_grace_period_seconds))},
        contract.POD_NAME.name: _field_ref("metadata.name"),
        contract.POD_NAMESPACE.name: _field_ref("metadata.namespace"),
        contract.SVC_NAME.name: {"value": world.service_name},
        contract.WORKLOAD_KIND.name: {"value": world.workload_kind},
        contract.WORKLOAD_NAME.name: {"value": world.workload_name},
        contract.RUN_NAME.name: {"value": world.run_name},
        contract.DATA_DIR.name: {"value": contract.DATA_MOUNT},
        contract.OUT_DIR.name: {"value": contract.OUT_MOUNT},
        contract.SHM_SIZE_BYTES.name: {"value": str(int(parse_quantity(config.shm_size)))},
        contract.GPUS_PER_NODE.name: {"value": str(config.gpus_per_node)},
        contract.NCCL_IB_DISABLE.name: {"value": _flag(not config.network.infiniband)},
        contract.NCCL_DEBUG.name: {"value": config.network.nccl_debug},
        contract.TORCH_NCCL_ASYNC_ERROR_HANDLING.name: {"value": _flag(config.network.async_error_handling)},
        contract.PET_RDZV_ENDPOINT.name: {"value": endpoint},
        contract.HANG_TIMEOUT_FLOOR.name: {"value": str(config.workload.hang_timeout.floor_seconds)},
        contract.HANG_TIMEOUT_CEILING.name: {"value": str(config.workload.hang_timeout.ceiling_seconds)},
    }
    if config.workload.liveness.seconds:
        sources[contract.LIVENESS_PORT.name] = {"value": str(config.workload.liveness.port)}
    if world.spare_pods:
        sources[contract.SPARE_PODS.name] = {"value": str(world.spare_pods)}
    if rdzv.keep_alive_max_attempts != contract.KEEP_ALIVE_MAX_ATTEMPTS:  # unset, the pods of earlier stacks stay as they were
        sources[contract.RDZV_KEEP_ALIVE_MAX_ATTEMPTS.name] = {"value": str(rdzv.keep_alive_max_attempts)}
    if config.network.infiniband:
        for var, value in ((contract.NCCL_IB_HCA, config.network.ib_hca), (contract.NCCL_IB_GID_INDEX, config.network.ib_gid_index)):
            if value is not None:
                sources[var.name] = {"value": str(value)}
    if config.storage.models is not None:
        sources[contract.MODELS_DIR.name] = {"value": contract.MODELS_MOUNT}
    if config.network.socket_ifname:
        sources[contract.NCCL_SOCKET_IFNAME.name] = {"value": config.network.socket_ifname}
        sources[contract.GLOO_SOCKET_IFNAME.name] = {"value": config.network.socket_ifname}
    if world.hf_token_secret_name:
        token_ref = {"valueFrom": {"secretKeyRef": {"name": world.hf_token_secret_name, "key": HF_TOKEN_SECRET_KEY}}}
        sources[contract.HF_TOKEN.name] = token_ref
        sources[contract.HUGGINGFACE_HUB_TOKEN.name] = token_ref
    for mirror, original in contract.PET_MIRRORS.items():
        source = sources[original]
        sources[mirror] = {"value": source["value"]} if "value" in source else {"value": f"$({original})"}

    # The provider diffs env lists by index: the variables every pod has come first and the
    # optional ones (token, models, interface) after them, so switching one on appends entries
    # instead of shifting every later one; the user's env comes last, after what it may reference
    # (a secret env variable too: `$(NAME)` expands in the container, not in the pod spec).
    always = [var for var in contract.ALL if var.name in sources and var.name not in _OPTIONAL_ENV]
    optional = [var for var in contract.ALL if var.name in sources and var.name in _OPTIONAL_ENV]
    env = [{"name": var.name, **sources[var.name]} for var in always]
    env.extend({"name": name, "value": value} for name, value in PROGRAM_ENV.items())
    if world.threads_per_process is not None and contract.OMP_NUM_THREADS not in config.env:
        env.append({"name": contract.OMP_NUM_THREADS, "value": str(world.threads_per_process)})
    env.extend({"name": var.name, **sources[var.name]} for var in optional)
    env.extend(
        {"name": name, "valueFrom": {"secretKeyRef": {"name": world.env_secret_name, "key": name}}}
        for name in config.secret_env
    )
    env.extend({"name": name, "value": value} for name, value in config.env.items())
    return env


def _resources(config: StackConfig) -> dict[str, Any]:
    def amounts(section: Any) -> dict[str, str]:
        return {name: value for name, value in (("cpu", section.cpu), ("memory", section.memory)) if value}

    requests, limits = amounts(config.resources.requests), amounts(config.resources.limits)
    # Extended resources (GPUs included) cannot be overcommitted: request and limit are equal.
    extended = dict(config.resources.extended)
    if config.gpus_per_node:
        extended[GPU_RESOURCE] = str(config.gpus_per_node)
    if config.network.infiniband:  # the device plugin mounts /dev/infiniband only into pods that ask
        extended.update({name: str(count) for name, count in config.network.rdma_resources.items()})
    return {"requests": {**requests, **extended}, "limits": {**limits, **extended}}


def _volume_mounts(config: StackConfig) -> list[dict[str, Any]]:
    mounts = [
        {"name": role, "mountPath": CLAIM_MOUNTS[role], "readOnly": volume.access_mode == "ReadOnlyMany"}
        for role, volume in config.storage.volumes().items()
    ]
    mounts += [{"name": SHM_VOLUME, "mountPath": contract.SHM_MOUNT}, {"name": TMP_VOLUME, "mountPath": contract.TMP_MOUNT}]
    return mounts + [mount.model_dump(by_alias=True, exclude_none=True) for mount in config.pod.volume_mounts]


def _volumes(config: StackConfig) -> list[dict[str, Any]]:
    claims = [
        {"name": role, "persistentVolumeClaim": {"claimName": volume.claim_name}}
        for role, volume in config.storage.volumes().items()
    ]
    return claims + [
        # The default 64 MB /dev/shm kills DataLoader workers with bus errors.
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": config.shm_size}},
        {"name": TMP_VOLUME, "emptyDir": {}},
        *copy.deepcopy(config.pod.volumes),
    ]


def training_image(config: StackConfig) -> dict[str, Any]:
    """The training image and its pull policy: the trainer runs it, and so does the rendezvous store."""
    return {"image": config.image.name, "imagePullPolicy": config.image.pull_policy}


def rendezvous_container_port(world: World) -> dict[str, Any]:
    """The world's rendezvous port as a container declares it: the trainer's and the rendezvous store's."""
    return {"name": RENDEZVOUS_PORT_NAME, "containerPort": world.rendezvous_port, "protocol": "TCP"}


def container(world: World) -> dict[str, Any]:
    config = world.config
    probed = liveness(config)
    return {
        "name": CONTAINER_NAME,
        **training_image(config),
        "command": list(contract.ENTRYPOINT_COMMAND),
        "args": list(config.run.args),
        "ports": [rendezvous_container_port(world), *probed["ports"]],
        "env": pod_env(world),
        "resources": _resources(config),
        "volumeMounts": _volume_mounts(config),
        "securityContext": container_security_context(config),
        **probed["probe"],
    }


def liveness(config: StackConfig) -> dict[str, Any]:
    """The trainer container's liveness probe, which its entrypoint answers (trainer/pod/liveness.py):
    its port and probe, none with workload.liveness.seconds 0."""
    wanted = config.workload.liveness
    if not wanted.seconds:
        return {"ports": [], "probe": {}}
    period = 5 if wanted.seconds >= 10 else max(1, wanted.seconds // 2)
    return {
        "ports": [{"name": LIVENESS_PORT_NAME, "containerPort": wanted.port, "protocol": "TCP"}],
        "probe": {"livenessProbe": {
            "httpGet": {"path": contract.LIVENESS_PATH, "port": LIVENESS_PORT_NAME},
            "periodSeconds": period,
            "timeoutSeconds": period,
            "failureThreshold": -(-wanted.seconds // period),
            # A pod that answers nothing cannot checkpoint either: its grace would only hold its replacement back.
            # The kubelet honours it where the container restarts in place (a StatefulSet's); a Job's pod it
            # kills with the pod's own grace period (kubernetes#119377).
            "terminationGracePeriodSeconds": 1,
        }},
    }  # fmt: skip


def container_security_context(config: StackConfig) -> dict[str, Any]:
    """What the restricted Pod Security level asks of a container, for the image's own user."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": config.pod.read_only_root_filesystem,
        "runAsNonRoot": True,
        # Nothing is added, not even IPC_LOCK for RDMA: a uid-1000 process gets no capability
        # without ambient ones, so memory pinned for RDMA is bounded by the memlock limit the
        # node's container runtime sets, whatever the pod asks.
        "capabilities": {"drop": ["ALL"]},
    }


def pod_security_context() -> dict[str, Any]:
    """The pod's: the image's user and group, and the runtime's default seccomp profile."""
    return {
        "runAsNonRoot": True,
        "runAsUser": contract.IMAGE_UID,
        "runAsGroup": contract.IMAGE_GID,
        "fsGroup": contract.IMAGE_GID,
        # Recursive chown of a large dataset volume on every start would delay each pod.
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def shared_pod_spec(world: World, containers: list[dict[str, Any]], termination_grace_period_seconds: int) -> dict[str, Any]:
    """What a pod of the world runs with, the trainer's and the rendezvous store's: the world's
    service account without its token, the image's user, and `containers`."""
    return {
        "serviceAccountName": world.service_account_name,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,  # thousands of Service env vars help nobody
        "terminationGracePeriodSeconds": termination_grace_period_seconds,
        "securityContext": pod_security_context(),
        "containers": containers,
    }


def fetch_data_container(config: StackConfig, trainer: dict[str, Any]) -> list[dict[str, Any]]:
    """The init container that fills the datasets claim from storage.datasets.source before the
    trainer starts (trainer/fetch.py): none without a source. It asks for the trainer's CPU and
    memory, not its GPUs or other devices, and gives its reason, failing, as its last log line."""
    source = config.storage.datasets.source
    if source is None:
        return []
    amounts = {kind: {name: value for name, value in trainer["resources"][kind].items() if name in ("cpu", "memory")}
               for kind in ("requests", "limits")}  # fmt: skip
    mounts = [mount for mount in trainer["volumeMounts"] if mount["mountPath"] in (contract.DATA_MOUNT, contract.TMP_MOUNT)]
    return [{
        "name": FETCH_CONTAINER_NAME,
        **training_image(config),
        "command": ["python", "-m", "trainer.fetch"],
        "args": ["--url", source.url, "--sha256", source.sha256, "--into", f"{contract.DATA_MOUNT}/{source.directory}",
                 *(["--endpoint", source.endpoint] if source.endpoint else [])],
        # an object store's credentials, as AWS's SDKs read them, from the stack's env and secretEnv;
        # the pod's name, which the claim's record of the fetch keeps
        "env": [{"name": name, "value": value} for name, value in PROGRAM_ENV.items()]
               + [copy.deepcopy(entry) for entry in trainer["env"]
                  if entry["name"].startswith(contract.AWS_PREFIX) or entry["name"] == contract.POD_NAME.name],
        "resources": amounts,
        "volumeMounts": mounts,
        "securityContext": copy.deepcopy(trainer["securityContext"]),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }]  # fmt: skip


def _extra_containers(config: StackConfig, trainer: dict[str, Any]) -> list[dict[str, Any]]:
    """`pod.initContainers`, then `pod.sidecars` (restartPolicy Always), each with the trainer's
    no-escalation, drop-ALL defaults where it sets neither."""
    defaults = {key: trainer["securityContext"][key] for key in ("allowPrivilegeEscalation", "capabilities")}

    def secured(extra: dict[str, Any]) -> dict[str, Any]:
        return {**copy.deepcopy(extra), "securityContext": {**copy.deepcopy(defaults), **(extra.get("securityContext") or {})}}

    sidecars = [{**secured(sidecar), "restartPolicy": "Always"} for sidecar in config.pod.sidecars]
    return [secured(init) for init in config.pod.init_containers] + sidecars


def image_pull_secrets(config: StackConfig) -> dict[str, Any]:
    secrets = config.image.pull_secrets
    return {"imagePullSecrets": [{"name": name} for name in secrets]} if secrets else {}


def node_placement(config: StackConfig) -> dict[str, Any]:
    """The nodes a pod of the stack may run on: its node selector, tolerations and priority."""
    scheduling = config.scheduling
    spec: dict[str, Any] = {}
    if scheduling.node_selector:
        spec["nodeSelector"] = dict(scheduling.node_selector)
    if scheduling.tolerations:
        spec["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in scheduling.tolerations]
    if scheduling.priority_class_name:
        spec["priorityClassName"] = scheduling.priority_class_name
    return spec


def _scheduling(config: StackConfig, world: World) -> dict[str, Any]:
    scheduling = config.scheduling
    spec = node_placement(config)
    if scheduling.affinity:
        spec["affinity"] = scheduling.affinity
    spread = scheduling.topology_spread
    if spread.enabled:
        spec["topologySpreadConstraints"] = [{
            "maxSkew": spread.max_skew,
            "topologyKey": spread.topology_key,
            "whenUnsatisfiable": spread.when_unsatisfiable,
            "labelSelector": {"matchLabels": world.selector},
        }]
    return spec


def pod_template(world: World) -> dict[str, Any]:
    """The world's pod template: the one every consumer of it is handed."""
    config = world.config
    trainer = container(world)
    spec: dict[str, Any] = {
        **shared_pod_spec(world, [trainer], config.workload.termination_grace_period_seconds),
        "volumes": _volumes(config),
        **_scheduling(config, world),
        **image_pull_secrets(config),
    }
    if world.workload_kind in (contract.INDEXED_JOB, contract.JOBSET):
        spec["restartPolicy"] = "Never"
        # Job pods get <job>-<index> as hostname; the subdomain gives them the DNS name MASTER_ADDR uses.
        spec["subdomain"] = world.service_name
    gang_spec, gang_annotations = gang.pod_scheduling(world)
    spec.update(gang_spec)
    if config.pod.runtime_class_name:
        spec["runtimeClassName"] = config.pod.runtime_class_name
    extra_containers = fetch_data_container(config, trainer) + _extra_containers(config, trainer)
    if extra_containers:
        spec["initContainers"] = extra_containers
    metadata: dict[str, Any] = {"labels": world.labels(CONTAINER_NAME)}
    annotations = {**world.extra_annotations, **_network_annotations(config), **gang_annotations}
    if annotations:
        metadata["annotations"] = annotations
    template = {"metadata": metadata, "spec": spec}
    return strategic_merge(template, config.pod.template_patch) if config.pod.template_patch else template


def _network_annotations(config: StackConfig) -> dict[str, str]:
    """Multus attaches the secondary networks (an InfiniBand or RoCE rail) named here to each pod."""
    networks = config.network.secondary_networks
    return {SECONDARY_NETWORKS_ANNOTATION: ",".join(networks)} if networks else {}
