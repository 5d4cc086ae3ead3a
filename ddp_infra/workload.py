"""The training pods, as plain Kubernetes dicts: env, container, pod template, StatefulSet, Job, JobSet.

Pure functions of (StackConfig, World): no Pulumi here, so they can be tested and fed to the
trainer's own env resolution directly.
"""

from __future__ import annotations

from typing import Any

from trainer import contract

from . import gang
from .pod_patch import apply_pod_extras
from .config import GPU_RESOURCE, SECONDARY_NETWORKS_ANNOTATION, SHM_VOLUME, TMP_VOLUME, StackConfig, parse_quantity
from .world import CONTAINER_NAME, HF_TOKEN_SECRET_KEY, RENDEZVOUS_PORT_NAME, WAIT_FOR_ANNOTATION, World

# What `pulumi up` waits for when it does not wait for the pods: the controller has taken the
# workload. skipAwait would be quicker, but it also skips waiting for a replaced world's deletion.
ACCEPTED = {
    contract.STATEFULSET: "jsonpath={.status.observedGeneration}",
    contract.INDEXED_JOB: "jsonpath={.status.startTime}",
    contract.JOBSET: "jsonpath={.status.replicatedJobsStatus}",
}
# A Job or JobSet that waits suspended in a Kueue queue has neither until Kueue admits it, which
# may take hours: `up` waits for what its controller writes to a suspended one.
# (A JobSet's controller writes its Jobs' status while they are suspended too.)
ACCEPTED_SUSPENDED = {contract.INDEXED_JOB: "jsonpath={.status.conditions}", contract.JOBSET: ACCEPTED[contract.JOBSET]}
TMP_MOUNT = contract.TMP_MOUNT
# Where a pod's own index comes from, per workload kind (the downward API reads it).
NODE_RANK_FIELD = {
    contract.STATEFULSET: f"metadata.labels['{contract.POD_INDEX_LABEL}']",
    contract.INDEXED_JOB: f"metadata.annotations['{contract.JOB_COMPLETION_INDEX_ANNOTATION}']",
    contract.JOBSET: f"metadata.annotations['{contract.JOB_COMPLETION_INDEX_ANNOTATION}']",
}
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
VOLUME_MOUNTS = {"datasets": contract.DATA_MOUNT, "outputs": contract.OUT_MOUNT, "models": contract.MODELS_MOUNT}


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
        contract.MODELS_DIR, contract.NCCL_SOCKET_IFNAME, contract.GLOO_SOCKET_IFNAME,
        contract.HF_TOKEN, contract.HUGGINGFACE_HUB_TOKEN,
    )
)


def pod_env(config: StackConfig, world: World) -> list[dict[str, Any]]:
    """The trainer container's env: the variables every pod has in the order of `contract.ALL`,
    HOME, the optional ones (also in that order), the secret env, then the extra env.

    Every value comes from `world` or `config`, so NNODES, WORLD_SIZE, MASTER_ADDR and their
    torchrun PET_* mirrors cannot disagree. A mirror of a downward-API variable is written as
    a Kubernetes dependent variable, `$(NODE_RANK)`, which resolves because the mirrored
    variable comes earlier in the list.
    """
    rdzv = config.rendezvous
    endpoint = rdzv.endpoint or f"{world.master_addr}:{world.rendezvous_port}"
    sources: dict[str, dict[str, Any]] = {
        contract.NNODES.name: {"value": str(world.nnodes)},
        contract.NPROC_PER_NODE.name: {"value": str(world.nproc_per_node)},
        contract.WORLD_SIZE.name: {"value": str(world.world_size)},
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
    }
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
    env.append({"name": "HOME", "value": TMP_MOUNT})  # the root filesystem is read-only
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
        {"name": role, "mountPath": VOLUME_MOUNTS[role], "readOnly": volume.access_mode == "ReadOnlyMany"}
        for role, volume in config.storage.volumes().items()
    ]
    return mounts + [{"name": SHM_VOLUME, "mountPath": contract.SHM_MOUNT}, {"name": TMP_VOLUME, "mountPath": TMP_MOUNT}]


def _volumes(config: StackConfig) -> list[dict[str, Any]]:
    claims = [
        {"name": role, "persistentVolumeClaim": {"claimName": volume.claim_name}}
        for role, volume in config.storage.volumes().items()
    ]
    return claims + [
        # The default 64 MB /dev/shm kills DataLoader workers with bus errors.
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": config.shm_size}},
        {"name": TMP_VOLUME, "emptyDir": {}},
    ]


def container(config: StackConfig, world: World) -> dict[str, Any]:
    return {
        "name": CONTAINER_NAME,
        "image": config.image.name,
        "imagePullPolicy": config.image.pull_policy,
        "command": list(contract.ENTRYPOINT_COMMAND),
        "args": list(config.run.args),
        "ports": [{"name": RENDEZVOUS_PORT_NAME, "containerPort": world.rendezvous_port, "protocol": "TCP"}],
        "env": pod_env(config, world),
        "resources": _resources(config),
        "volumeMounts": _volume_mounts(config),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            # Nothing is added, not even IPC_LOCK for RDMA: a uid-1000 process gets no capability
            # without ambient ones, so memory pinned for RDMA is bounded by the memlock limit the
            # node's container runtime sets, whatever the pod asks.
            "capabilities": {"drop": ["ALL"]},
        },
    }


def _scheduling(config: StackConfig, world: World) -> dict[str, Any]:
    scheduling = config.scheduling
    spec: dict[str, Any] = {}
    if scheduling.node_selector:
        spec["nodeSelector"] = dict(scheduling.node_selector)
    if scheduling.tolerations:
        spec["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in scheduling.tolerations]
    if scheduling.affinity:
        spec["affinity"] = scheduling.affinity
    if scheduling.priority_class_name:
        spec["priorityClassName"] = scheduling.priority_class_name
    spread = scheduling.topology_spread
    if spread.enabled:
        spec["topologySpreadConstraints"] = [{
            "maxSkew": spread.max_skew,
            "topologyKey": spread.topology_key,
            "whenUnsatisfiable": spread.when_unsatisfiable,
            "labelSelector": {"matchLabels": world.selector},
        }]
    return spec


def pod_template(config: StackConfig, world: World) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "serviceAccountName": world.service_account_name,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,  # thousands of Service env vars help nobody
        "terminationGracePeriodSeconds": config.workload.termination_grace_period_seconds,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": contract.IMAGE_UID,
            "runAsGroup": contract.IMAGE_GID,
            "fsGroup": contract.IMAGE_GID,
            # Recursive chown of a large dataset volume on every start would delay each pod.
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container(config, world)],
        "volumes": _volumes(config),
        **_scheduling(config, world),
    }
    if config.image.pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in config.image.pull_secrets]
    if world.workload_kind in (contract.INDEXED_JOB, contract.JOBSET):
        spec["restartPolicy"] = "Never"
        # Job pods get <job>-<index> as hostname; the subdomain gives them the DNS name MASTER_ADDR uses.
        spec["subdomain"] = world.service_name
    gang_spec, gang_annotations = gang.pod_scheduling(config, world)
    spec.update(gang_spec)
    metadata: dict[str, Any] = {"labels": world.labels(CONTAINER_NAME)}
    annotations = {**world.extra_annotations, **pod_network_annotations(config), **gang_annotations}
    if annotations:
        metadata["annotations"] = annotations
    return apply_pod_extras({"metadata": metadata, "spec": spec}, config)


def pod_network_annotations(config: StackConfig) -> dict[str, str]:
    """Multus attaches the secondary networks (an InfiniBand or RoCE rail) named here to each pod."""
    networks = config.network.secondary_networks
    return {SECONDARY_NETWORKS_ANNOTATION: ",".join(networks)} if networks else {}


def workload_metadata(config: StackConfig, world: World) -> dict[str, Any]:
    annotations = dict(world.extra_annotations)
    if not config.workload.wait_for_ready:
        accepted = ACCEPTED_SUSPENDED if gang.starts_suspended(config) else ACCEPTED
        annotations[WAIT_FOR_ANNOTATION] = accepted[world.workload_kind]
    metadata: dict[str, Any] = {
        "name": world.workload_name,
        "namespace": world.namespace,
        "labels": {**world.labels(CONTAINER_NAME), **gang.workload_labels(config)},
    }
    if annotations:
        metadata["annotations"] = annotations
    return metadata


def statefulset_manifest(config: StackConfig, world: World) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": workload_metadata(config, world),
        "spec": {
            "replicas": world.nnodes,
            # All pods start at once: rendezvous needs the whole world, not one pod at a time.
            "podManagementPolicy": "Parallel",
            "serviceName": world.service_name,
            "selector": {"matchLabels": world.selector},
            "template": pod_template(config, world),
        },
    }


def job_manifest(config: StackConfig, world: World) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": workload_metadata(config, world),
        "spec": {
            "completionMode": "Indexed",
            "completions": world.nnodes,
            "parallelism": world.nnodes,
            "backoffLimit": config.workload.backoff_limit,
            "ttlSecondsAfterFinished": config.workload.ttl_seconds_after_finished,
            # A replacement pod starts only once the failed one is gone, so an index is never doubled.
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": {"rules": _pod_failure_rules()},
            "template": pod_template(config, world),
            **_suspended(config),
        },
    }


def _suspended(config: StackConfig) -> dict[str, Any]:
    return {"suspend": True} if gang.starts_suspended(config) else {}


def jobset_manifest(config: StackConfig, world: World) -> dict[str, Any]:
    """A JobSet of one Indexed Job, one pod per node.

    Any pod's failure fails the Job at once (backoffLimit 0), and the JobSet restarts the whole
    world, which resumes from its checkpoint, up to `workload.backoffLimit` times. The old world's
    pods are gone (each wrote its SIGTERM checkpoint) before the new one starts (BlockingRecreate),
    so two worlds never write one run. A pod env that describes no world fails the JobSet at once.
    The JobSet's network uses the stack's own headless Service, which exists before it.
    """
    job = contract.JOBSET_REPLICATED_JOB
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": workload_metadata(config, world),
        "spec": {
            "network": {"enableDNSHostnames": True, "subdomain": world.service_name, "publishNotReadyAddresses": True},
            "replicatedJobs": [{
                "name": job,
                "replicas": 1,
                "template": {
                    "metadata": {"labels": world.labels(CONTAINER_NAME)},
                    "spec": {
                        "completionMode": "Indexed",
                        "completions": world.nnodes,
                        "parallelism": world.nnodes,
                        "backoffLimit": 0,
                        "podFailurePolicy": {"rules": [_fail_job_on_bad_env()]},
                        "template": pod_template(config, world),
                    },
                },
            }],
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [job]},
            "failurePolicy": {
                "maxRestarts": config.workload.backoff_limit,
                "restartStrategy": "BlockingRecreate",
                # The Job's only pod failure policy that fails it is the bad env's: no restart can fix that.
                "rules": [{"name": "pod_env_describes_no_world", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
            },
            "ttlSecondsAfterFinished": config.workload.ttl_seconds_after_finished,
            **_suspended(config),
        },
    }  # fmt: skip


def pod_template_of(manifest: dict[str, Any]) -> dict[str, Any]:
    """The pod template inside a workload manifest of any kind."""
    if manifest["kind"] == "JobSet":
        (job,) = manifest["spec"]["replicatedJobs"]
        return job["template"]["spec"]["template"]
    return manifest["spec"]["template"]


def _exit_codes(code: int) -> dict[str, Any]:
    return {"containerName": CONTAINER_NAME, "operator": "In", "values": [code]}


def _fail_job_on_bad_env() -> dict[str, Any]:
    return {"action": "FailJob", "onExitCodes": _exit_codes(contract.EXIT_BAD_ENV)}


def _pod_failure_rules() -> list[dict[str, Any]]:
    """Which pod failures end the run.

    An evicted, preempted or deleted pod checkpoints on SIGTERM and exits 143: it is replaced and the
    world resumes, without counting against backoffLimit. A pod env that describes no world fails
    the Job at once. Anything else (a crash, an OOM kill, a SIGKILL) counts.
    """
    return [
        _fail_job_on_bad_env(),
        {"action": "Ignore", "onExitCodes": _exit_codes(contract.EXIT_TERMINATED)},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]


def workload_manifest(config: StackConfig, world: World) -> dict[str, Any]:
    if world.workload_kind == contract.INDEXED_JOB:
        return job_manifest(config, world)
    if world.workload_kind == contract.JOBSET:
        return jobset_manifest(config, world)
    return statefulset_manifest(config, world)
