"""The stack's configuration: one pydantic model, read from `pulumi.Config()`.

Keys are camelCase, as `pulumi config set` writes them (`ddp-infra:nodes`,
`ddp-infra:storage.outputs.size` with `--path`). What the CLI stores is accepted as it is
stored: `pulumi config set nodes 64` stores the string "64", objects arrive as JSON.

Every problem is collected and raised as one `ConfigError` before any resource is
registered: each line names the full key, the value given and what is allowed. Checks that
involve several top-level keys run only on keys that are individually valid, so a bad key
never hides or garbles another key's problem.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any, Callable, Literal, Optional, get_args

import pulumi
from pulumi.runtime import config as runtime_config
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    InstanceOf,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from trainer import contract

PROJECT = "ddp-infra"
MAX_NODES = 1024  # a StatefulSet this size is already far beyond what one rendezvous handles well
MAX_GPUS_PER_NODE = 16
GPU_RESOURCE = "nvidia.com/gpu"
# Label prefix the program owns: selectors and the recommended labels live here.
RESERVED_LABEL_PREFIX = "app.kubernetes.io/"
# Env the program sets itself besides the contract's names.
PROGRAM_ENV = ("HOME",)


# --- constrained scalar types -----------------------------------------------------------------

def _pattern(regex: str, allowed: str) -> Callable[[str], str]:
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise PydanticCustomError("pattern", "{allowed}", {"allowed": allowed})
        return value

    check.allowed = allowed  # type: ignore[attr-defined]  # shown in the config reference
    return check


_QUANTITY_RE = r"[+]?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?\d+)?"
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": Decimal("0.001"), "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def parse_quantity(quantity: str) -> Decimal:
    """A Kubernetes quantity ("500m", "8Gi", "1e3") as a number of base units."""
    match = re.fullmatch(_QUANTITY_RE, quantity)
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {quantity!r}")
    suffix = match.group(3) or ""
    number = Decimal(match.group(1))
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix[:1] in "eE" and suffix:
        return number * Decimal(10) ** int(suffix[1:])
    return number * _DECIMAL[suffix]


Quantity = Annotated[
    str, AfterValidator(_pattern(_QUANTITY_RE, "a Kubernetes quantity such as 500m, 4, 8Gi or 100G"))
]
DnsLabel = Annotated[
    str,
    AfterValidator(
        _pattern(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", "a DNS-1123 label: lowercase a-z, 0-9, '-', at most 63")
    ),
]
DnsSubdomain = Annotated[
    str,
    Field(max_length=253),
    AfterValidator(
        _pattern(
            r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
            "a DNS-1123 subdomain: lowercase a-z, 0-9, '-', '.'",
        )
    ),
]
# StatefulSet pods are named <name>-<ordinal> and get a controller-revision-hash label
# <name>-<10 chars>, which must stay a 63-character label value: hence 52.
WorkloadName = Annotated[
    str,
    AfterValidator(
        _pattern(r"[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?", "a DNS-1123 label of at most 52 characters")
    ),
]
LabelKey = Annotated[
    str,
    AfterValidator(
        _pattern(
            r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?",
            "a label key: optional DNS prefix and '/', then at most 63 of A-Z a-z 0-9 - _ .",
        )
    ),
]
LabelValue = Annotated[
    str,
    AfterValidator(
        _pattern(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?", "at most 63 of A-Z a-z 0-9 - _ .")
    ),
]
EnvName = Annotated[
    str, AfterValidator(_pattern(r"[A-Za-z_][A-Za-z0-9_]*", "an env var name: letters, digits, '_'"))
]
Duration = Annotated[
    str, AfterValidator(_pattern(r"[1-9]\d*(s|m|h)", "a Pulumi duration such as 600s, 30m or 2h"))
]
# A secret (the token, a secretEnv value) never enters the model as text: it is a secret Output.
SecretString = Annotated[
    InstanceOf[pulumi.Output],
    WithJsonSchema({"type": "string", "format": "secret"}),
]


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        arbitrary_types_allowed=True,
    )


def _field_problem(path: tuple[str, ...], allowed: str, given: Any) -> PydanticCustomError:
    """An error a model validator raises about one of its fields, so the key can name that field."""
    return PydanticCustomError("invalid", "{allowed}", {"path": path, "allowed": allowed, "given": given})


# --- nested sections ----------------------------------------------------------------------------

class ImageConfig(_Model):
    name: Annotated[str, Field(min_length=1, description="Trainer image reference (registry/repository:tag or @digest).")]
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field("IfNotPresent", description="imagePullPolicy.")
    pull_secrets: tuple[DnsSubdomain, ...] = Field((), description="Names of existing image pull Secrets.")


class NamespaceConfig(_Model):
    name: DnsLabel = Field("ddp-training", description="Namespace everything lives in.")
    create: bool = Field(True, description="Create the namespace (false: use an existing one).")


AccessMode = Literal["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"]


class VolumeConfig(_Model):
    """A claim the stack creates, or an existing one it mounts (create: false)."""

    claim_name: DnsSubdomain
    create: bool = Field(True, description="Create the claim (false: mount an existing claim named claimName).")
    size: Optional[Quantity] = Field(None, description="Requested storage, e.g. 100Gi (required when create is true).")
    storage_class: Optional[DnsSubdomain] = Field(None, description="StorageClass (unset: the cluster default).")
    access_mode: AccessMode = Field("ReadWriteOnce", description="Access mode; ReadWriteMany for multi-node.")
    retain_on_delete: bool = Field(
        True, description="Keep the claim in the cluster when Pulumi deletes it (destroy, rename)."
    )
    protect: bool = Field(False, description="Refuse any delete or replace of the claim in Pulumi.")

    @model_validator(mode="after")
    def _created_claims_have_a_size(self) -> "VolumeConfig":
        if self.create and self.size is None:
            raise _field_problem(("size",), "a quantity such as 100Gi when create is true", None)
        if not self.create:
            for field in ("size", "storage_class"):
                if field in self.model_fields_set:
                    raise _field_problem(
                        (to_camel(field),), "unset when create is false (an existing claim is used as it is)",
                        getattr(self, field),
                    )
        return self


class DatasetsVolume(VolumeConfig):
    claim_name: DnsSubdomain = Field("datasets-pvc", description="Claim mounted at /data.")
    size: Optional[Quantity] = Field("100Gi", description="Requested storage (required when create is true).")


class OutputsVolume(VolumeConfig):
    claim_name: DnsSubdomain = Field("outputs-pvc", description="Claim mounted at /out (checkpoints, results).")
    size: Optional[Quantity] = Field("100Gi", description="Requested storage (required when create is true).")


class ModelsVolume(VolumeConfig):
    claim_name: DnsSubdomain = Field("models-pvc", description="Claim mounted at /models (local model snapshots).")


class StorageConfig(_Model):
    datasets: DatasetsVolume = Field(DatasetsVolume(), description="Datasets volume, mounted at /data.")
    outputs: OutputsVolume = Field(OutputsVolume(), description="Outputs volume, mounted at /out.")
    models: Optional[ModelsVolume] = Field(None, description="Optional models volume, mounted at /models.")

    def volumes(self) -> dict[str, VolumeConfig]:
        """The configured volumes by role, in mount order."""
        roles = {"datasets": self.datasets, "outputs": self.outputs, "models": self.models}
        return {role: volume for role, volume in roles.items() if volume is not None}

    def created(self) -> list[VolumeConfig]:
        """The volumes whose claims the stack creates (not `create: false`)."""
        return [volume for volume in self.volumes().values() if volume.create]

    @property
    def namespace_retained(self) -> bool:
        """Deleting a namespace deletes every claim in it: it is kept when a claim in it is."""
        return any(volume.retain_on_delete for volume in self.created())

    @property
    def namespace_protected(self) -> bool:
        return any(volume.protect for volume in self.created())


class ResourceAmounts(_Model):
    cpu: Optional[Quantity] = Field(None, description="CPU, e.g. 4 or 500m.")
    memory: Optional[Quantity] = Field(None, description="Memory, e.g. 16Gi.")


def _no_gpu_in_extended(extended: dict[str, str]) -> dict[str, str]:
    if GPU_RESOURCE in extended:
        raise PydanticCustomError("gpu", "{allowed}", {"allowed": f"resources without {GPU_RESOURCE}: set gpusPerNode"})
    return extended


class ResourcesConfig(_Model):
    requests: ResourceAmounts = Field(
        ResourceAmounts(cpu="1", memory="4Gi"), description="Container requests (GPUs come from gpusPerNode)."
    )
    limits: ResourceAmounts = Field(
        ResourceAmounts(memory="8Gi"), description="Container limits (GPUs come from gpusPerNode)."
    )
    extended: Annotated[dict[LabelKey, Quantity], AfterValidator(_no_gpu_in_extended)] = Field(
        {}, description="Extended resources set as both request and limit, e.g. example.com/fpga: 1 (RDMA: network.rdmaResources)."
    )

    @model_validator(mode="after")
    def _requests_within_limits(self) -> "ResourcesConfig":
        for name in ("cpu", "memory"):
            request, limit = getattr(self.requests, name), getattr(self.limits, name)
            if request and limit and parse_quantity(request) > parse_quantity(limit):
                raise _field_problem(("requests", name), f"at most limits.{name} ({limit})", request)
        return self


# Multus's annotation naming a pod's secondary networks (NetworkAttachmentDefinitions).
SECONDARY_NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
DEFAULT_RDMA_RESOURCE = "rdma/hca_shared_devices_a"  # the k8s-rdma-shared-dev-plugin's usual name
SecondaryNetwork = Annotated[
    str,
    AfterValidator(
        _pattern(
            r"([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?(@[A-Za-z0-9_.-]{1,15})?",
            "a NetworkAttachmentDefinition: [namespace/]name[@interface], e.g. ib-rail-0 or infra/ib-rail-0@net1",
        )
    ),
]
IbHca = Annotated[
    str,
    AfterValidator(
        _pattern(
            r"[\^=]?[A-Za-z0-9_]+(:\d+)?(,[A-Za-z0-9_]+(:\d+)?)*",
            "NCCL's HCA list: names or prefixes with optional :port, '^' to exclude, '=' for exact names, e.g. mlx5 or =mlx5_0:1,mlx5_1:1",
        )
    ),
]


class NetworkConfig(_Model):
    socket_ifname: Optional[Annotated[str, AfterValidator(_pattern(r"[\^=]?[A-Za-z0-9_.:-]+(,[A-Za-z0-9_.:-]+)*", "an interface name or NCCL list such as eth0, ^lo,docker0"))]] = Field(
        None, description="NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME (unset: the trainer's preflight picks one)."
    )
    infiniband: bool = Field(
        False,
        description="Use InfiniBand/RDMA: request rdmaResources, set NCCL_IB_DISABLE=0, and fail the preflight "
        "without /dev/infiniband (false: NCCL_IB_DISABLE=1, sockets).",
    )
    rdma_resources: dict[LabelKey, Annotated[int, Field(ge=1, le=64)]] = Field(
        {DEFAULT_RDMA_RESOURCE: 1},
        description="infiniband: the RDMA device plugin's resources per pod, as request and limit "
        "(the name differs by plugin: rdma/hca_shared_devices_a, rdma/rdma_shared_device_a, nvidia.com/...).",
    )
    secondary_networks: tuple[SecondaryNetwork, ...] = Field(
        (), description=f"Multus networks to attach to each pod (the {SECONDARY_NETWORKS_ANNOTATION} annotation)."
    )
    ib_hca: Optional[IbHca] = Field(None, description="infiniband: NCCL_IB_HCA, the HCAs NCCL uses (unset: all).")
    ib_gid_index: Optional[int] = Field(
        None, ge=0, le=255, description="infiniband: NCCL_IB_GID_INDEX (RoCE; unset: NCCL's default)."
    )
    nccl_debug: Literal["VERSION", "WARN", "INFO", "TRACE"] = Field("WARN", description="NCCL_DEBUG level.")
    async_error_handling: bool = Field(
        True, description="TORCH_NCCL_ASYNC_ERROR_HANDLING: a failed collective aborts instead of hanging."
    )

    @model_validator(mode="after")
    def _infiniband_settings_need_infiniband(self) -> "NetworkConfig":
        if self.infiniband and not self.rdma_resources:
            raise _field_problem(
                ("rdmaResources",), f"at least one RDMA device resource when infiniband is true, e.g. {DEFAULT_RDMA_RESOURCE}: 1",
                {},
            )
        if not self.infiniband:
            for field in ("ib_hca", "ib_gid_index"):
                if getattr(self, field) is not None:
                    raise _field_problem(
                        (to_camel(field),), "unset when infiniband is false (NCCL_IB_DISABLE=1 ignores it)", getattr(self, field)
                    )
        return self


class RendezvousConfig(_Model):
    port: int = Field(29500, ge=1024, le=65535, description="Rendezvous / TCPStore port on pod 0.")
    backend: Literal[contract.RDZV_BACKENDS] = Field("c10d", description="torchrun rendezvous backend.")  # type: ignore[valid-type]
    endpoint: Optional[Annotated[str, AfterValidator(_pattern(r"[A-Za-z0-9.-]+:\d{1,5}", "host:port"))]] = Field(
        None, description="host:port of an etcd for etcd-v2 (other backends use pod 0)."
    )
    join_timeout_seconds: int = Field(1800, ge=30, le=86400, description="Seconds to wait for the whole world.")
    read_timeout_seconds: int = Field(120, ge=10, le=3600, description="c10d store read timeout.")
    last_call_timeout_seconds: int = Field(30, ge=1, le=3600, description="Wait for late joiners.")
    close_timeout_seconds: int = Field(30, ge=1, le=3600, description="Wait for the rendezvous to close.")
    master_wait_timeout_seconds: int = Field(
        600, ge=10, le=86400, description="Seconds the preflight waits for pod 0's DNS name and port."
    )
    max_restarts: int = Field(3, ge=0, le=100, description="torchrun --max-restarts of the whole world.")

    @model_validator(mode="after")
    def _etcd_needs_an_endpoint(self) -> "RendezvousConfig":
        if self.backend == "etcd-v2" and self.endpoint is None:
            raise _field_problem(("endpoint",), "host:port of an etcd with the v2 API when backend is etcd-v2", None)
        if self.backend != "etcd-v2" and self.endpoint is not None:
            raise _field_problem(("endpoint",), "unset unless backend is etcd-v2 (the store is on pod 0)", self.endpoint)
        return self


class RunConfig(_Model):
    name: Optional[Annotated[str, AfterValidator(_pattern(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", "1-63 of A-Z a-z 0-9 . _ -, starting alphanumeric"))]] = Field(
        None, description="Run directory under /out; stable so a restart resumes (unset: the workload name)."
    )
    args: tuple[str, ...] = Field(
        contract.DEFAULT_TRAIN_ARGS, min_length=1, description="What you would write after `torchrun`: script or -m module and its arguments."
    )


class WorkloadConfig(_Model):
    kind: Literal[contract.WORKLOAD_KINDS] = Field(  # type: ignore[valid-type]
        contract.INDEXED_JOB,
        description="job (an Indexed Job that runs to completion), statefulset (pods kept up, restarted after the run ends) or jobset (a JobSet of one Indexed Job: any pod's failure restarts the whole world; needs the JobSet controller).",
    )
    name: WorkloadName = Field("trainer", description="Name of the StatefulSet, Job or JobSet; the Service is <name>-rdzv.")
    wait_for_ready: bool = Field(
        False, description="Make `pulumi up` wait for every pod to be Ready (job: for the Job to complete)."
    )
    ready_timeout: Duration = Field("30m", description="How long `pulumi up` waits when waitForReady is true.")
    termination_grace_period_seconds: int = Field(
        120, ge=0, le=3600, description="Time a pod gets after SIGTERM to write a checkpoint."
    )
    max_unavailable: int = Field(
        1, ge=0, le=100000,
        description="Healthy pods a voluntary disruption (a node drain) may evict at once; each stops the world at a checkpoint and it re-forms. 0: drains wait for the run to end.",
    )
    backoff_limit: int = Field(
        3, ge=0, le=100,
        description="job: pod failures (crashes, OOM kills, SIGKILL; not evictions or SIGTERM stops) before the Job fails; jobset: restarts of the whole world (after any pod's failure) before the JobSet fails.",
    )
    ttl_seconds_after_finished: int = Field(
        86400, ge=0, le=30 * 86400, description="job, jobset: seconds a finished Job or JobSet and its pods are kept."
    )


class Toleration(_Model):
    key: Optional[LabelKey] = Field(None, description="Taint key (unset with Exists: every taint).")
    operator: Literal["Exists", "Equal"] = Field("Equal", description="How value is matched.")
    value: Optional[LabelValue] = Field(None, description="Taint value (Equal only).")
    effect: Optional[Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]] = Field(
        None, description="Taint effect (unset: every effect)."
    )
    toleration_seconds: Optional[int] = Field(None, ge=0, description="NoExecute: seconds the pod stays.")

    @model_validator(mode="after")
    def _exists_has_no_value(self) -> "Toleration":
        if self.operator == "Exists" and self.value:
            raise _field_problem(("value",), "unset when operator is Exists", self.value)
        return self


class TopologySpreadConfig(_Model):
    enabled: bool = Field(True, description="Spread pods over topologyKey.")
    topology_key: LabelKey = Field("kubernetes.io/hostname", description="Node label to spread over.")
    max_skew: int = Field(1, ge=1, le=1024, description="Largest allowed difference in pod count.")
    when_unsatisfiable: Literal["ScheduleAnyway", "DoNotSchedule"] = Field(
        "ScheduleAnyway", description="Whether spreading is a preference or a rule."
    )


_AFFINITY_KINDS = ("nodeAffinity", "podAffinity", "podAntiAffinity")


def _check_affinity(value: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    unknown = sorted(set(value or {}) - set(_AFFINITY_KINDS))
    if unknown:
        raise PydanticCustomError("affinity", "keys among {allowed}", {"allowed": ", ".join(_AFFINITY_KINDS)})
    return value


GANG_SCHEDULERS = ("none", "kueue", "volcano")


class GangConfig(_Model):
    """Gang admission: the whole world is admitted at once, or none of it (ddp_infra/gang.py)."""

    scheduler: Literal[GANG_SCHEDULERS] = Field(  # type: ignore[valid-type]
        "none",
        description="none (pods are scheduled one by one), kueue (the workload waits suspended in a Kueue LocalQueue until its whole quota is free; kinds job and jobset) or volcano (Volcano's scheduler binds all the pods of a PodGroup of minMember = nodes, or none).",
    )
    queue: Optional[DnsLabel] = Field(
        None, description="kueue: the LocalQueue in the stack's namespace (required); volcano: the Queue (unset: Volcano's default)."
    )
    workload_priority_class: Optional[DnsSubdomain] = Field(
        None, description="kueue: a WorkloadPriorityClass, the world's priority in its queue (the pods keep scheduling.priorityClassName)."
    )

    @model_validator(mode="after")
    def _scheduler_has_what_it_needs(self) -> "GangConfig":
        if self.scheduler == "kueue" and not self.queue:
            raise _field_problem(("queue",), "the name of a LocalQueue in the stack's namespace (required with scheduler kueue)", None)
        if self.scheduler == "none" and self.queue:
            raise _field_problem(("queue",), "unset with scheduler none (set scheduler to kueue or volcano)", self.queue)
        if self.scheduler != "kueue" and self.workload_priority_class:
            raise _field_problem(
                ("workloadPriorityClass",), "unset unless scheduler is kueue (a Kueue WorkloadPriorityClass)", self.workload_priority_class
            )
        return self


class SchedulingConfig(_Model):
    node_selector: dict[LabelKey, LabelValue] = Field({}, description="Pod nodeSelector.")
    tolerations: tuple[Toleration, ...] = Field((), description="Pod tolerations.")
    affinity: Annotated[Optional[dict[str, Any]], AfterValidator(_check_affinity)] = Field(
        None, description="Pod affinity, as Kubernetes writes it (nodeAffinity, podAffinity, podAntiAffinity)."
    )
    priority_class_name: Optional[DnsSubdomain] = Field(None, description="PriorityClass of the pods.")
    topology_spread: TopologySpreadConfig = Field(TopologySpreadConfig(), description="Topology spread of the pods.")
    gang: GangConfig = Field(GangConfig(), description="Gang admission of the whole world: Kueue or Volcano.")


# --- the escape hatch: what the program does not model, validated all the same ------------------

# The pod's own volumes and where they are mounted in the trainer container.
SHM_VOLUME, TMP_VOLUME = "dshm", "tmp"
PROGRAM_VOLUMES = ("datasets", "outputs", "models", SHM_VOLUME, TMP_VOLUME)
PROGRAM_MOUNT_PATHS = (contract.DATA_MOUNT, contract.OUT_MOUNT, contract.MODELS_MOUNT, contract.SHM_MOUNT, contract.TMP_MOUNT)
# Fields of a Kubernetes Container an extra container may set (restartPolicy is the program's: it
# makes a sidecar a sidecar).
CONTAINER_FIELDS = (
    "name", "image", "imagePullPolicy", "command", "args", "workingDir", "env", "envFrom", "ports", "resources",
    "resizePolicy", "volumeMounts", "volumeDevices", "securityContext", "livenessProbe", "readinessProbe",
    "startupProbe", "lifecycle", "terminationMessagePath", "terminationMessagePolicy", "stdin", "stdinOnce", "tty",
)  # fmt: skip
# The sources a Kubernetes Volume can have (exactly one per volume).
VOLUME_SOURCES = (
    "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "configMap", "csi", "downwardAPI",
    "emptyDir", "ephemeral", "fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs",
    "hostPath", "image", "iscsi", "nfs", "persistentVolumeClaim", "photonPersistentDisk", "portworxVolume",
    "projected", "quobyte", "rbd", "scaleIO", "secret", "storageos", "vsphereVolume",
)  # fmt: skip
AbsolutePath = Annotated[
    str, AfterValidator(_pattern(r"/[^\s:]*", "an absolute path without spaces or ':', e.g. /var/log/trainer"))
]


def _check_container(container: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(container) - set(CONTAINER_FIELDS))
    if unknown:
        raise _field_problem((unknown[0],), f"a Container field: {', '.join(CONTAINER_FIELDS)}", container[unknown[0]])
    for field in ("name", "image"):
        if not isinstance(container.get(field), str) or not container[field]:
            raise _field_problem((field,), f"a {'DNS-1123 label' if field == 'name' else 'image reference'} (required)", container.get(field))
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", container["name"]):
        raise _field_problem(("name",), "a DNS-1123 label: lowercase a-z, 0-9, '-', at most 63", container["name"])
    return container


def _check_volume(volume: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(volume.get("name"), str) or not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", volume["name"]):
        raise _field_problem(("name",), "a DNS-1123 label: lowercase a-z, 0-9, '-', at most 63", volume.get("name"))
    sources = sorted(set(volume) - {"name"})
    if len(sources) != 1 or sources[0] not in VOLUME_SOURCES:
        raise _field_problem(
            tuple(sources[-1:]), f"exactly one volume source besides name: {', '.join(VOLUME_SOURCES)}", sources or None
        )
    return volume


def _check_template_patch(patch: dict[str, Any]) -> dict[str, Any]:
    from .pod_patch import owned_paths_in  # imported late: it imports this module

    for path, why in owned_paths_in(patch):
        raise _field_problem(path, why, _lookup(patch, path))
    return patch


_check_container.allowed = "a Kubernetes Container: name, image, and its other fields but restartPolicy"  # type: ignore[attr-defined]
_check_volume.allowed = "a Kubernetes Volume: name and one source"  # type: ignore[attr-defined]
_check_template_patch.allowed = "metadata and spec of a pod template, as a strategic-merge patch"  # type: ignore[attr-defined]
ExtraContainer = Annotated[dict[str, Any], AfterValidator(_check_container)]
ExtraVolume = Annotated[dict[str, Any], AfterValidator(_check_volume)]


class ExtraMount(_Model):
    name: DnsLabel = Field(description="A volume of pod.volumes (or the program's: datasets, outputs, models, dshm, tmp).")
    mount_path: AbsolutePath = Field(description="Where it appears in the trainer container.")
    read_only: bool = Field(False, description="Mount read-only.")
    sub_path: Optional[Annotated[str, Field(min_length=1)]] = Field(None, description="A path inside the volume to mount instead of its root.")


class PodConfig(_Model):
    runtime_class_name: Optional[DnsSubdomain] = Field(
        None, description="RuntimeClass of the pods, e.g. nvidia (unset: the cluster's default runtime)."
    )
    volumes: tuple[ExtraVolume, ...] = Field((), description="Extra pod volumes, as Kubernetes writes them: a name and one source.")
    volume_mounts: tuple[ExtraMount, ...] = Field((), description="Extra mounts in the trainer container.")
    init_containers: tuple[ExtraContainer, ...] = Field(
        (), description="Containers that run to completion before the trainer starts, as Kubernetes writes them."
    )
    sidecars: tuple[ExtraContainer, ...] = Field(
        (),
        description="Containers that run beside the trainer for the pod's life (log shippers, bucket mounters): "
        "native sidecars, init containers with restartPolicy Always (Kubernetes 1.29+).",
    )
    read_only_root_filesystem: bool = Field(
        True, description="The trainer container's root filesystem is read-only; false where a GPU runtime hook must write to it."
    )
    template_patch: Optional[Annotated[dict[str, Any], AfterValidator(_check_template_patch)]] = Field(
        None,
        description="A strategic-merge patch of the pod template (metadata, spec) for anything else; "
        "it may not touch what the program owns (see the README).",
    )

    @model_validator(mode="after")
    def _names_are_unique_and_the_programs_are_kept(self) -> "PodConfig":
        names = [volume["name"] for volume in self.volumes]
        for index, name in enumerate(names):
            if name in PROGRAM_VOLUMES or name in names[:index]:
                raise _field_problem(
                    ("volumes", index, "name"), f"a name not used by another volume ({', '.join(PROGRAM_VOLUMES)} are the program's)", name
                )
        known = set(names) | set(PROGRAM_VOLUMES)
        paths = [mount.mount_path.rstrip("/") or "/" for mount in self.volume_mounts]
        for index, mount in enumerate(self.volume_mounts):
            if mount.name not in known:
                raise _field_problem(("volumeMounts", index, "name"), "the name of a volume of pod.volumes or of the program's", mount.name)
            if paths[index] in PROGRAM_MOUNT_PATHS or paths[index] in paths[:index]:
                raise _field_problem(
                    ("volumeMounts", index, "mountPath"),
                    f"a path no other mount uses ({', '.join(PROGRAM_MOUNT_PATHS)} are the program's)", mount.mount_path,
                )
        containers = [("initContainers", i, c) for i, c in enumerate(self.init_containers)]
        containers += [("sidecars", i, c) for i, c in enumerate(self.sidecars)]
        if not containers:
            return self
        from .world import CONTAINER_NAME  # imported late: it imports this module

        seen = {CONTAINER_NAME}
        for key, index, container in containers:
            if container["name"] in seen:
                raise _field_problem((key, index, "name"), f"a name no other container has ({CONTAINER_NAME} is the trainer's)", container["name"])
            seen.add(container["name"])
            for mount_index, mount in enumerate(container.get("volumeMounts") or []):
                if not isinstance(mount, dict) or mount.get("name") not in known:
                    raise _field_problem(
                        (key, index, "volumeMounts", mount_index, "name"), "the name of a volume of pod.volumes or of the program's",
                        mount.get("name") if isinstance(mount, dict) else mount,
                    )
        return self


def _lookup(document: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        document = document[part]
    return document


class KubernetesConfig(_Model):
    render_dir: Optional[Annotated[str, Field(min_length=1)]] = Field(
        None,
        description="Write manifests to this directory (relative to the project) instead of applying them. "
        "They include Secrets, base64-encoded (not encrypted): keep the directory out of git.",
    )
    context: Optional[Annotated[str, Field(min_length=1)]] = Field(None, description="kubeconfig context to use.")


# --- the whole stack ----------------------------------------------------------------------------

class StackConfig(_Model):
    """Everything one stack of ddp-infra is configured with."""

    nodes: int = Field(1, ge=1, le=MAX_NODES, description="Pods in the training world (NNODES).")
    gpus_per_node: int = Field(
        0, ge=0, le=MAX_GPUS_PER_NODE, description="nvidia.com/gpu per pod; 0 for CPU-only pods."
    )
    procs_per_node: int = Field(
        0, ge=0, le=256, description="Training processes per pod (NPROC_PER_NODE); 0: one per GPU, or 1 without GPUs."
    )
    image: ImageConfig = Field(description="The trainer image: name (required), pullPolicy, pullSecrets.")
    namespace: NamespaceConfig = Field(NamespaceConfig(), description="Namespace to create or use.")
    storage: StorageConfig = Field(StorageConfig(), description="Volumes for /data, /out and /models.")
    hf_token: Optional[SecretString] = Field(
        None, description="Hugging Face token; set it with `pulumi config set --secret hfToken ...`."
    )
    resources: ResourcesConfig = Field(ResourcesConfig(), description="Container CPU and memory.")
    shm_size: Quantity = Field("1Gi", description="Size of the memory-backed /dev/shm (counts against memory).")
    network: NetworkConfig = Field(NetworkConfig(), description="NCCL / Gloo network settings.")
    rendezvous: RendezvousConfig = Field(RendezvousConfig(), description="torchrun rendezvous settings.")
    run: RunConfig = Field(RunConfig(), description="The training run: its name and torchrun arguments.")
    workload: WorkloadConfig = Field(WorkloadConfig(), description="Which workload runs the pods, and how.")
    scheduling: SchedulingConfig = Field(SchedulingConfig(), description="Where the pods may run.")
    labels: dict[LabelKey, LabelValue] = Field({}, description="Extra labels on the workload's objects and pods (claims keep theirs).")
    annotations: dict[LabelKey, str] = Field({}, description="Extra annotations on the workload's objects and pods (claims keep theirs).")
    env: dict[EnvName, str] = Field({}, description="Extra container env; may use $(NAME) of the contract's variables.")
    secret_env: dict[EnvName, SecretString] = Field(
        {}, description="Extra container env from a Secret; set each with `pulumi config set --secret --path 'secretEnv.NAME' ...`."
    )
    pod: PodConfig = Field(
        PodConfig(), description="The escape hatch: runtime class, extra volumes and mounts, init containers, sidecars, a pod template patch."
    )
    kubernetes: KubernetesConfig = Field(KubernetesConfig(), description="How the Kubernetes provider connects.")

    @property
    def nproc_per_node(self) -> int:
        """Processes per pod: the explicit value, else one per GPU, else one."""
        return self.procs_per_node or self.gpus_per_node or 1


# --- reading and reporting ------------------------------------------------------------------------

@dataclass(frozen=True)
class Problem:
    key: str  # the full config key, e.g. ddp-infra:storage.outputs.size
    given: str
    allowed: str

    def __str__(self) -> str:
        return f"{self.key}: got {self.given}; allowed: {self.allowed}"


class ConfigError(pulumi.RunError):
    """Every problem of a stack's configuration, one line each.

    A RunError, so Pulumi reports the message alone, without a stack trace.
    """

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = "\n".join(f"  {problem}" for problem in problems)
        super().__init__(f"invalid stack configuration ({len(problems)} problem(s)); nothing was created:\n{lines}")


def _full_key(path: list[str | int]) -> str:
    key = ""
    for part in path:
        if part == "[key]":  # pydantic's marker for a bad map key: the key itself is named
            continue
        if isinstance(part, int):
            key += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", str(part)):
            key += f".{part}" if key else str(part)
        else:  # a map key such as a label name, quoted as `pulumi config set --path` takes it
            key += f'["{part}"]'
    return f"{PROJECT}:{key}"


def _shown(value: Any) -> str:
    if value is None:
        return "(not set)"
    text = json.dumps(value) if isinstance(value, (dict, list, tuple)) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _problems_from(error: ValidationError, prefix: list[str | int]) -> list[Problem]:
    problems = []
    for detail in error.errors():
        path = prefix + list(detail["loc"])
        ctx = detail.get("ctx") or {}
        if "path" in ctx:  # a model validator speaking about one of its fields
            path += list(ctx["path"])
            given = _shown(ctx.get("given"))
        elif detail["type"] == "missing":
            given = "(not set)"
        else:
            given = _shown(detail["input"])
        allowed = (
            ctx.get("allowed")
            or _integer_range(path, detail["type"])
            or re.sub(r"^(Input should be|Value error,)\s*", "", detail["msg"])
        )
        problems.append(Problem(_full_key(path), given, allowed))
    return problems


# pydantic's errors for a value that is not an integer, or one out of the field's bounds.
_INTEGER_ERRORS = {"int_parsing", "int_type", "int_from_float", "greater_than_equal", "less_than_equal"}


def _integer_range(path: list[str | int], error_type: str) -> Optional[str]:
    """`an integer from 1 to 1024` for any error of a bounded integer key: the whole range at once,
    whether the value was not a number or out of bounds."""
    field = _field_at(path) if error_type in _INTEGER_ERRORS else None
    if field is None or field.annotation not in (int, Optional[int]):
        return None
    low = next((m.ge for m in field.metadata if hasattr(m, "ge")), None)
    high = next((m.le for m in field.metadata if hasattr(m, "le")), None)
    if low is None:
        return None
    return f"an integer from {low} to {high}" if high is not None else f"an integer from {low}"


def _field_at(path: list[str | int]) -> Any:
    """The model field a config path names (list indices skipped), or None."""
    model: Any = StackConfig
    field = None
    for part in path:
        if isinstance(part, int):
            continue
        fields = {f.alias or name: f for name, f in getattr(model, "model_fields", {}).items()}
        field = fields.get(part)
        if field is None:
            return None
        inner = [field.annotation, *get_args(field.annotation)]
        inner += [arg for candidate in list(inner) for arg in get_args(candidate)]  # Optional[list[Model]]
        model = next((t for t in inner if isinstance(t, type) and issubclass(t, BaseModel)), None)
    return field


_HF_TOKEN_KEY = StackConfig.model_fields["hf_token"].alias
_SECRET_ENV_KEY = StackConfig.model_fields["secret_env"].alias
_NOT_SHOWN = "(a secret, not shown)"  # what a problem about a secret says it was given
# One validator per top-level key, so that each key is judged on its own (see _cross_key_problems).
_FIELD_ADAPTERS = {
    field.alias: TypeAdapter(Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation)
    for field in StackConfig.model_fields.values()
    if field.alias != _HF_TOKEN_KEY
}

# Every key a stack may set, in the model's order (hfToken too, which is read apart as a secret).
_ALL_KEYS = tuple(field.alias for field in StackConfig.model_fields.values())


def _cross_key_problems(valid: dict[str, Any]) -> list[Problem]:
    """Rules about whole keys or several keys at once; each runs only on keys that are valid."""
    problems: list[Problem] = []

    def have(*keys: str) -> bool:
        return all(key in valid for key in keys)

    if have("gpusPerNode", "procsPerNode"):
        gpus, procs = valid["gpusPerNode"], valid["procsPerNode"]
        if gpus and procs and procs != gpus:
            problems.append(Problem(
                _full_key(["procsPerNode"]), repr(procs),
                f"0 or {gpus} (one process per GPU: fewer leaves GPUs idle, more makes NCCL share a GPU)",
            ))
    if have("nodes", "storage"):
        for role, volume in valid["storage"].volumes().items():
            if volume.access_mode == "ReadWriteOncePod" and valid["nodes"] > 1:
                problems.append(Problem(
                    _full_key(["storage", role, "accessMode"]), repr(volume.access_mode),
                    "ReadWriteMany, ReadOnlyMany or ReadWriteOnce when nodes > 1 (ReadWriteOncePod admits one pod)",
                ))
    if have("shmSize", "resources"):
        limit = valid["resources"].limits.memory
        if limit and parse_quantity(valid["shmSize"]) >= parse_quantity(limit):
            problems.append(Problem(
                _full_key(["shmSize"]), repr(valid["shmSize"]),
                f"less than resources.limits.memory ({limit}): /dev/shm is memory and counts against it",
            ))
    if have("network", "resources"):
        for name in valid["network"].rdma_resources:
            if valid["network"].infiniband and name in valid["resources"].extended:
                problems.append(Problem(
                    _full_key(["resources", "extended", name]), repr(valid["resources"].extended[name]),
                    "a resource not in network.rdmaResources (that key requests it already)",
                ))
    if have("workload", "nodes") and valid["workload"].kind == contract.JOBSET:
        # JobSet refuses a JobSet whose pod names (<name>-node-0-<index>-<5 random>) are not DNS-1035 labels.
        name, nodes = valid["workload"].name, valid["nodes"]
        fixed = len(contract.pod_hostname(contract.JOBSET, name, nodes - 1)) + len("-abcde") - len(name)
        if len(name) + fixed > 63 or not name[0].isalpha():
            problems.append(Problem(
                _full_key(["workload", "name"]), repr(name),
                f"with kind jobset, a name that starts with a letter and has at most {63 - fixed} characters at nodes={nodes} "
                f"(its pods are named <name>-{contract.JOBSET_REPLICATED_JOB}-0-<index>-<5 random>, at most 63)",
            ))
    if have("workload", "scheduling") and valid["scheduling"].gang.scheduler == "kueue":
        if valid["workload"].kind == contract.STATEFULSET:
            problems.append(Problem(
                _full_key(["scheduling", "gang", "scheduler"]), repr("kueue"),
                "none or volcano with workload.kind statefulset (Kueue admits a Job or a JobSet as one workload; "
                "set workload.kind to job or jobset)",
            ))
    if have("network", "annotations") and valid["network"].secondary_networks:
        if SECONDARY_NETWORKS_ANNOTATION in valid["annotations"]:
            problems.append(Problem(
                _full_key(["annotations", SECONDARY_NETWORKS_ANNOTATION]), repr(valid["annotations"][SECONDARY_NETWORKS_ANNOTATION]),
                "no value here when network.secondaryNetworks is set (it writes this annotation)",
            ))
    if have("labels"):
        for key in valid["labels"]:
            if key.startswith(RESERVED_LABEL_PREFIX):
                problems.append(Problem(
                    _full_key(["labels", key]), repr(valid["labels"][key]),
                    f"a key outside {RESERVED_LABEL_PREFIX} (the program sets those and selects on them)",
                ))
    reserved = {var.name for var in contract.ALL} | set(PROGRAM_ENV)
    if have("env"):
        for name in valid["env"]:
            if name in reserved:
                problems.append(Problem(
                    _full_key(["env", name]), repr(valid["env"][name]),
                    "a name the program does not set (this one comes from the env contract)",
                ))
    if have("secretEnv"):
        for name in valid["secretEnv"]:
            if name in reserved:
                problems.append(Problem(
                    _full_key(["secretEnv", name]), _NOT_SHOWN,
                    "a name the program does not set (this one comes from the env contract)",
                ))
            elif name in valid.get("env", {}):
                problems.append(Problem(
                    _full_key(["secretEnv", name]), _NOT_SHOWN, "a name not in env too (a variable has one value)",
                ))
    return problems


def _decode(raw: str) -> Any:
    """Objects and arrays arrive as JSON; scalars as the string the CLI stored."""
    return json.loads(raw) if raw.lstrip()[:1] in ("{", "[") else raw


def parse(raw: dict[str, Any], hf_token: Optional[pulumi.Output] = None) -> StackConfig:
    """Validate decoded config values (keys as in the stack file, without the project prefix)."""
    problems: list[Problem] = []
    unknown = sorted(set(raw) - set(_FIELD_ADAPTERS))
    for key in unknown:
        problems.append(Problem(_full_key([key]), _shown(raw[key]), f"a known key: {', '.join(_ALL_KEYS)}"))
    valid: dict[str, Any] = {}
    for key, adapter in _FIELD_ADAPTERS.items():
        field = StackConfig.model_fields[_to_field_name(key)]
        if key not in raw:
            if field.is_required():
                problems.append(Problem(_full_key([key]), "(not set)", f"a value: {field.description}"))
            else:
                valid[key] = field.get_default(call_default_factory=True)
            continue
        try:
            valid[key] = adapter.validate_python(raw[key])
        except ValidationError as error:
            problems.extend(_problems_from(error, [key]))
    problems.extend(_cross_key_problems(valid))
    if problems:
        raise ConfigError(problems)
    return StackConfig.model_validate({**valid, _HF_TOKEN_KEY: hf_token})


def _to_field_name(alias: str) -> str:
    return next(name for name, field in StackConfig.model_fields.items() if field.alias == alias)


def load(config: Optional[pulumi.Config] = None) -> StackConfig:
    """Read and validate the stack's config; raise one ConfigError listing every problem."""
    config = config or pulumi.Config(PROJECT)
    raw: dict[str, Any] = {}
    problems: list[Problem] = []
    unknown = sorted(_stored_keys() - set(_FIELD_ADAPTERS) - {_HF_TOKEN_KEY})
    for key in [*_FIELD_ADAPTERS, *unknown]:
        if key == _SECRET_ENV_KEY:
            continue  # read apart: its values stay secret
        stored = config.get(key)
        if stored is None:
            continue
        if key in unknown and pulumi.runtime.is_config_secret(config.full_key(key)):
            stored = _NOT_SHOWN  # an unknown key is reported with its value, and this one is a secret
        try:
            raw[key] = _decode(stored)
        except json.JSONDecodeError as error:
            problems.append(Problem(_full_key([key]), _shown(stored), f"valid JSON ({error.msg})"))
    hf_token = _read_hf_token(config, problems)
    secret_env = _read_secret_env(config, problems)
    if secret_env is not None:
        raw[_SECRET_ENV_KEY] = secret_env
    try:
        parsed = parse(raw, hf_token)
    except ConfigError as error:
        raise ConfigError(problems + error.problems) from None
    if problems:
        raise ConfigError(problems)
    _warn_about_single_node_claims(parsed)
    return parsed


def _warn_about_single_node_claims(config: StackConfig) -> None:
    """ReadWriteOnce binds every pod of a claim to one node: fine on a one-node dev cluster,
    a scheduling dead end for a multi-node GPU world. A warning, not an error, for that reason."""
    if config.nodes == 1:
        return
    for role, volume in config.storage.volumes().items():
        if volume.create and volume.access_mode == "ReadWriteOnce":
            pulumi.log.warn(
                f"{_full_key(['storage', role, 'accessMode'])} is ReadWriteOnce with nodes={config.nodes}: "
                "all pods must then share one Kubernetes node; use ReadWriteMany on a multi-node cluster"
            )


def _stored_keys() -> set[str]:
    """The project's keys the engine passed, so a typo (`node` for `nodes`) is reported.

    The SDK has no public listing: this reads the map `set_all_config` fills.
    """
    stored = set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())
    prefix = f"{PROJECT}:"
    return {key[len(prefix):] for key in stored if key.startswith(prefix)}


def _read_hf_token(config: pulumi.Config, problems: list[Problem]) -> Optional[pulumi.Output]:
    """The token as a secret Output, or None; a token stored in plain text is refused."""
    full_key = config.full_key(_HF_TOKEN_KEY)
    stored = config.get_secret(_HF_TOKEN_KEY)
    # Pulumi.yaml declares an empty default so that stacks without a token stay valid.
    is_empty = config.get(_HF_TOKEN_KEY) in (None, "")
    if is_empty:
        return None
    if not pulumi.runtime.is_config_secret(full_key):
        problems.append(Problem(
            full_key, "(a value stored in plain text, not shown)",
            "a secret: `pulumi config set --secret hfToken <token>`",
        ))
        return None
    return stored


def _read_secret_env(config: pulumi.Config, problems: list[Problem]) -> Optional[dict[str, pulumi.Output]]:
    """Each value as a secret Output, by its name; None when the key is unset or unreadable.

    `pulumi config set --secret --path 'secretEnv.NAME'` stores an object whose leaves are
    encrypted; the engine hands the object over decrypted, as JSON, and marks the whole key
    secret. The names are no secret, so the JSON is read raw (`get_secret` would hide the names
    as well); only the values are wrapped. Which leaves were encrypted is not passed on: a key
    with no encrypted leaf at all is refused, one plain leaf beside encrypted ones cannot be told.
    """
    full_key = config.full_key(_SECRET_ENV_KEY)
    stored = runtime_config.get_config(full_key)
    if stored in (None, ""):
        return None
    try:
        decoded = json.loads(stored)
    except json.JSONDecodeError as error:
        problems.append(Problem(full_key, _NOT_SHOWN, f"valid JSON ({error.msg})"))
        return None
    how = f"`pulumi config set --secret --path '{_SECRET_ENV_KEY}.NAME' <value>`"
    if not isinstance(decoded, dict):
        problems.append(Problem(full_key, _NOT_SHOWN, f"an object of env var names to secrets: {how}"))
        return None
    if decoded and not pulumi.runtime.is_config_secret(full_key):
        problems.append(Problem(full_key, "(values stored in plain text, not shown)", f"secrets: {how}"))
        return None
    values: dict[str, pulumi.Output] = {}
    for name, value in decoded.items():
        if isinstance(value, str):
            values[name] = pulumi.Output.secret(value)
        else:  # an encrypted leaf is always a string
            problems.append(Problem(_full_key([_SECRET_ENV_KEY, name]), _NOT_SHOWN, f"a secret string: {how}"))
    return values
