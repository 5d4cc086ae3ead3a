"""The whole stack's config: `StackConfig`, its small sections (image, namespace, the Kubernetes
connection), and the rules about several keys at once (`cross_key_problems`)."""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any, Callable, Literal, Optional

from pydantic import AfterValidator, Field, model_validator

from trainer import contract

from ..names import PROGRAM_ENV, SECONDARY_NETWORKS_ANNOTATION
from .network import NetworkConfig, RendezvousConfig
from .nodes import NodeCount, NodeRange
from .pod import PodConfig, label_key_problem
from .problems import NOT_SHOWN, Problem, full_key
from .resources import ResourcesConfig
from .scheduling import SchedulingConfig
from .scalars import (
    Bytes, DnsLabel, DnsSubdomain, EnvName, ImageReference, LabelKey, LabelValue, Model, SecretEnvName, SecretString,
    field_problem, parse_quantity,
)
from .storage import StorageConfig
from .workload import RunConfig, WorkloadConfig

MAX_GPUS_PER_NODE = 16


# --- annotations --------------------------------------------------------------------------------

# The API server refuses an object whose annotations' keys and values add up to more than 256 KiB;
# 1 KiB of it is left for the program's own (pulumi.com/waitFor, the Multus and Volcano ones).
MAX_ANNOTATION_BYTES = 256 * 1024 - 1024
# Annotations the API server reads as settings of the pods (ValidatePodSpecificAnnotations, and the
# warnings of pkg/api/pod/warnings.go). Those that duplicate a field of the pod are refused: the
# field is the way to set it, and the program sets some of them (the pods' seccompProfile), which the
# annotation would then have to match. The API server warns about the ones that do nothing any more,
# and refuses a static pod's mirror annotation on a pod that names no node.
POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
_DEPRECATED = "no value here: a deprecated annotation; set the "
_SYSCTLS = "no value here: does nothing since Kubernetes 1.11; set the pods' securityContext.sysctls with pod.templatePatch"
POD_FIELD_ANNOTATIONS = {
    "scheduler.alpha.kubernetes.io/tolerations": "no value here: set scheduling.tolerations",
    "seccomp.security.alpha.kubernetes.io/pod": _DEPRECATED + "pods' securityContext.seccompProfile (RuntimeDefault) with pod.templatePatch",
    "container.seccomp.security.alpha.kubernetes.io/": _DEPRECATED + "container's securityContext.seccompProfile (pod.sidecars, pod.templatePatch)",
    "container.apparmor.security.beta.kubernetes.io/": _DEPRECATED + "container's securityContext.appArmorProfile (pod.sidecars, pod.templatePatch)",
    "scheduler.alpha.kubernetes.io/critical-pod": "no value here: does nothing since Kubernetes 1.16; set scheduling.priorityClassName",
    "security.alpha.kubernetes.io/sysctls": _SYSCTLS,
    "security.alpha.kubernetes.io/unsafe-sysctls": _SYSCTLS,
    "kubernetes.io/config.mirror": "no value here: it marks a static pod's mirror, which the API server refuses on a pod without a node",
}


def _check_annotations(annotations: dict[str, str]) -> dict[str, str]:
    size = sum(len(key.encode()) + len(value.encode()) for key, value in annotations.items())
    if size > MAX_ANNOTATION_BYTES:
        raise field_problem((), f"at most {MAX_ANNOTATION_BYTES} bytes of keys and values in all (these have {size})", annotations)
    for key, value in annotations.items():
        for name, allowed in POD_FIELD_ANNOTATIONS.items():
            if key == name or (name.endswith("/") and key.startswith(name)):
                raise field_problem((key,), allowed, value)
    cost = annotations.get(POD_DELETION_COST)
    if cost is not None and not (re.fullmatch(r"-[0-9]+|0|[1-9][0-9]*", cost) and -(2**31) <= int(cost) < 2**31):
        raise field_problem((POD_DELETION_COST,), "a 32-bit integer, e.g. 100 or -5 (the pods' deletion cost)", cost)
    return annotations


_check_annotations.allowed = "at most 255 KiB in all; no pod annotation a field of the pod replaced (seccomp, AppArmor, sysctls, tolerations, critical-pod), nor a mirror pod's"  # type: ignore[attr-defined]


# --- nested sections ----------------------------------------------------------------------------

class ImageConfig(Model):
    name: ImageReference = Field(description="Trainer image reference (registry/repository:tag or @digest).")
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field("IfNotPresent", description="imagePullPolicy.")
    pull_secrets: tuple[DnsSubdomain, ...] = Field((), description="Names of existing image pull Secrets.")

    @model_validator(mode="after")
    def _each_pull_secret_once(self) -> "ImageConfig":
        """The API server warns about a pull Secret named twice."""
        for index, name in enumerate(self.pull_secrets):
            if name in self.pull_secrets[:index]:
                raise field_problem(("pullSecrets", index), "a Secret not named before in the list", name)
        return self


class NamespaceConfig(Model):
    name: DnsLabel = Field("ddp-training", description="Namespace everything lives in.")
    create: bool = Field(True, description="Create the namespace (false: use an existing one).")


class KubernetesConfig(Model):
    render_dir: Optional[Annotated[str, Field(min_length=1)]] = Field(
        None,
        description="Write manifests to this directory (relative to the project) instead of applying them. "
        "They include Secrets, base64-encoded (not encrypted): keep the directory out of git.",
    )
    context: Optional[Annotated[str, Field(min_length=1)]] = Field(None, description="kubeconfig context to use.")


class StackConfig(Model):
    """Everything one stack of ddp-infra is configured with."""

    nodes: NodeCount = Field(
        NodeRange(1, 1),
        description="Pods in the training world (NNODES); MIN:MAX for an elastic world that trains at any size the cluster "
        "gives it in that range (kinds job and jobset).",
    )
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
    shm_size: Bytes = Field("1Gi", description="Size of the memory-backed /dev/shm (counts against memory).")
    network: NetworkConfig = Field(NetworkConfig(), description="NCCL / Gloo network settings.")
    rendezvous: RendezvousConfig = Field(RendezvousConfig(), description="torchrun rendezvous settings.")
    run: RunConfig = Field(RunConfig(), description="The training run: its name and torchrun arguments.")
    workload: WorkloadConfig = Field(WorkloadConfig(), description="Which workload runs the pods, and how.")
    scheduling: SchedulingConfig = Field(SchedulingConfig(), description="Where the pods may run.")
    labels: dict[LabelKey, LabelValue] = Field({}, description="Extra labels on the workload's objects and pods (claims keep theirs).")
    annotations: Annotated[dict[LabelKey, str], AfterValidator(_check_annotations)] = Field({}, description="Extra annotations on the workload's objects and pods (claims keep theirs).")
    env: dict[EnvName, str] = Field({}, description="Extra container env; may use $(NAME) of the contract's variables.")
    secret_env: dict[SecretEnvName, SecretString] = Field(
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


# --- rules about several keys at once ---------------------------------------------------------

Rule = Callable[[dict[str, Any]], list[Problem]]


def _on_valid(*keys: str) -> Callable[[Rule], Rule]:
    """A rule that runs only when each of `keys` is valid on its own (and finds nothing otherwise)."""

    def wrap(rule: Rule) -> Rule:
        @functools.wraps(rule)
        def checked(valid: dict[str, Any]) -> list[Problem]:
            return rule(valid) if all(key in valid for key in keys) else []

        return checked

    return wrap


@_on_valid("gpusPerNode", "procsPerNode")
def _one_process_per_gpu(valid: dict[str, Any]) -> list[Problem]:
    gpus, procs = valid["gpusPerNode"], valid["procsPerNode"]
    if gpus and procs and procs != gpus:
        return [Problem(
            full_key(["procsPerNode"]), repr(procs),
            f"0 or {gpus} (one process per GPU: fewer leaves GPUs idle, more makes NCCL share a GPU)",
        )]  # fmt: skip
    return []


@_on_valid("nodes", "storage")
def _each_claim_admits_every_pod(valid: dict[str, Any]) -> list[Problem]:
    if valid["nodes"].maximum <= 1:
        return []
    return [
        Problem(
            full_key(["storage", role, "accessMode"]), repr(volume.access_mode),
            "ReadWriteMany, ReadOnlyMany or ReadWriteOnce when nodes > 1 (ReadWriteOncePod admits one pod)",
        )
        for role, volume in valid["storage"].volumes().items()
        if volume.access_mode == "ReadWriteOncePod"
    ]  # fmt: skip


@_on_valid("shmSize", "resources")
def _shm_fits_in_the_memory_limit(valid: dict[str, Any]) -> list[Problem]:
    limit = valid["resources"].limits.memory
    if limit and parse_quantity(valid["shmSize"]) >= parse_quantity(limit):
        return [Problem(
            full_key(["shmSize"]), repr(valid["shmSize"]),
            f"less than resources.limits.memory ({limit}): /dev/shm is memory and counts against it",
        )]  # fmt: skip
    return []


@_on_valid("network", "resources")
def _rdma_resources_are_asked_for_once(valid: dict[str, Any]) -> list[Problem]:
    network, extended = valid["network"], valid["resources"].extended
    return [
        Problem(
            full_key(["resources", "extended", name]), repr(extended[name]),
            "a resource not in network.rdmaResources (that key requests it already)",
        )
        for name in network.rdma_resources
        if network.infiniband and name in extended
    ]  # fmt: skip


@_on_valid("workload", "nodes")
def _jobset_pod_names_are_dns_labels(valid: dict[str, Any]) -> list[Problem]:
    """JobSet refuses a JobSet whose pod names (<name>-node-0-<index>-<5 random>) are not DNS-1035
    labels (a workload name starts with a letter whatever its kind: its Service's name is one too)."""
    if valid["workload"].kind != contract.JOBSET:
        return []
    name, nodes = valid["workload"].name, valid["nodes"].maximum
    fixed = len(contract.pod_hostname(contract.JOBSET, name, nodes - 1)) + len("-abcde") - len(name)
    if len(name) + fixed > 63:
        return [Problem(
            full_key(["workload", "name"]), repr(name),
            f"with kind jobset, a name of at most {63 - fixed} characters at nodes={nodes} "
            f"(its pods are named <name>-{contract.JOBSET_REPLICATED_JOB}-0-<index>-<5 random>, at most 63)",
        )]  # fmt: skip
    return []


@_on_valid("workload", "scheduling")
def _kueue_admits_jobs(valid: dict[str, Any]) -> list[Problem]:
    if valid["scheduling"].gang.scheduler == "kueue" and valid["workload"].kind == contract.STATEFULSET:
        return [Problem(
            full_key(["scheduling", "gang", "scheduler"]), repr("kueue"),
            "none or volcano with workload.kind statefulset (Kueue admits a Job or a JobSet as one workload; "
            "set workload.kind to job or jobset)",
        )]  # fmt: skip
    return []


@_on_valid("workload", "nodes", "scheduling")
def _topology_slices_divide_the_pods(valid: dict[str, Any]) -> list[Problem]:
    """Kueue places the Job's pods in slices of `size`: a count it knows, which they divide."""
    topology = valid["scheduling"].topology
    if not (topology and topology.slice):
        return []
    size, nodes = topology.slice.size, valid["nodes"]
    key = full_key(["scheduling", "topology", "slice", "size"])
    if nodes.elastic:
        return [Problem(key, repr(size), f"unset with an elastic world, nodes {nodes} (Kueue admits it partly: its slices would not add up)")]
    pods = nodes.maximum + valid["workload"].spare_pods
    if pods % size:
        return [Problem(key, repr(size), f"a divisor of the Job's {pods} pods (nodes and workload.sparePods), such as 1 or {pods}")]
    return []


@_on_valid("workload", "nodes", "scheduling")
def _kubernetes_gang_is_one_job_of_every_pod(valid: dict[str, Any]) -> list[Problem]:
    """What the Kubernetes scheduler's gang needs: a Job whose controller makes it a PodGroup, one
    of all its pods (ddp_infra/gang.py)."""
    if valid["scheduling"].gang.scheduler != "kubernetes":
        return []
    workload, scheduler = valid["workload"], full_key(["scheduling", "gang", "scheduler"])
    why_not = []
    if workload.kind == contract.STATEFULSET:
        why_not.append("workload.kind statefulset (the Job controller makes the PodGroup: set workload.kind to job or jobset)")
    if valid["nodes"].elastic:
        why_not.append(f"an elastic world, nodes {valid['nodes']} (the Job controller's PodGroup asks for every pod, MAX, at once; "
                       "kueue and volcano admit MIN)")  # fmt: skip
    if workload.spare_pods:
        why_not.append(f"workload.sparePods {workload.spare_pods} (the Job controller's PodGroup would hold the world back "
                       "until its spares fit too)")  # fmt: skip
    return [Problem(scheduler, repr("kubernetes"), f"none, kueue or volcano with {reason}") for reason in why_not]


_RENDEZVOUS_APART = "rendezvous.backend c10d with store own-pod (the defaults), or etcd-v2"


def _rendezvous_on_pod_0(valid: dict[str, Any]) -> str | None:
    """The setting that puts the store on pod 0 (RendezvousConfig.store_on_pod_0), so that no world
    forms without it ("backend static" or "store pod-0"); None where it lives apart."""
    rendezvous = valid.get("rendezvous")
    if rendezvous is None or not rendezvous.store_on_pod_0:
        return None
    return "backend static" if rendezvous.backend == "static" else "store pod-0"


@_on_valid("nodes")
def _elastic_world_forms_from_any_pods(valid: dict[str, Any]) -> list[Problem]:
    """What an elastic world (nodes MIN:MAX) needs: pods any subset of which can form it, and a
    scheduler that admits part of it."""
    if not valid["nodes"].elastic:
        return []
    problems: list[Problem] = []
    nodes = repr(str(valid["nodes"]))
    kind = valid["workload"].kind if "workload" in valid else None
    if kind == contract.STATEFULSET:
        problems.append(Problem(
            full_key(["nodes"]), nodes,
            "one number with workload.kind statefulset (its pods are replaced one identity each and never do without "
            "one); set workload.kind to job or jobset for an elastic world",
        ))
    if "scheduling" in valid and valid["scheduling"].gang.scheduler == "kueue" and kind == contract.JOBSET:
        problems.append(Problem(
            full_key(["nodes"]), nodes,
            "one number with scheduling.gang.scheduler kueue and workload.kind jobset (Kueue admits a JobSet whole, so "
            "the world could never train smaller); use workload.kind job (Kueue then admits MIN to MAX pods, as its "
            "quota holds), or scheduler none or volcano",
        ))
    if where := _rendezvous_on_pod_0(valid):
        problems.append(Problem(
            full_key(["nodes"]), nodes,
            f"one number with rendezvous.{where} (the world would need pod 0 in every size); an elastic world needs "
            f"{_RENDEZVOUS_APART}",
        ))
    return problems


@_on_valid("workload", "rendezvous")
def _liveness_has_a_port_of_its_own(valid: dict[str, Any]) -> list[Problem]:
    port = valid["workload"].liveness.port
    if valid["workload"].liveness.seconds and port == valid["rendezvous"].port:
        return [Problem(
            full_key(["workload", "liveness", "port"]), repr(port),
            f"a port other than rendezvous.port ({port}): the entrypoint answers the kubelet's probe on its own port",
        )]  # fmt: skip
    return []


@_on_valid("workload")
def _spare_pods_take_any_pods_place(valid: dict[str, Any]) -> list[Problem]:
    """What spare pods need: a world formed from whichever pods join first, and a workload whose
    lost pods are replaced one by one."""
    spares = valid["workload"].spare_pods
    if not spares:
        return []
    problems: list[Problem] = []
    if valid["workload"].kind == contract.STATEFULSET:
        problems.append(Problem(
            full_key(["workload", "sparePods"]), repr(spares),
            "0 with workload.kind statefulset (its lost pod is replaced at once, in its own identity); "
            "set workload.kind to job or jobset for spare pods",
        ))
    if where := _rendezvous_on_pod_0(valid):
        problems.append(Problem(
            full_key(["workload", "sparePods"]), repr(spares),
            f"0 with rendezvous.{where} (a spare takes any pod's place, pod 0's too); spare pods need {_RENDEZVOUS_APART}",
        ))
    return problems


@_on_valid("network", "annotations")
def _secondary_networks_write_their_annotation(valid: dict[str, Any]) -> list[Problem]:
    annotations = valid["annotations"]
    if valid["network"].secondary_networks and SECONDARY_NETWORKS_ANNOTATION in annotations:
        return [Problem(
            full_key(["annotations", SECONDARY_NETWORKS_ANNOTATION]), repr(annotations[SECONDARY_NETWORKS_ANNOTATION]),
            "no value here when network.secondaryNetworks is set (it writes this annotation)",
        )]  # fmt: skip
    return []


@_on_valid("labels")
def _labels_are_the_users(valid: dict[str, Any]) -> list[Problem]:
    labels = valid["labels"]
    return [
        Problem(full_key(["labels", key]), repr(labels[key]), allowed)
        for key in labels
        if (allowed := label_key_problem(key))
    ]


# The variables the program sets itself: the contract's, and HOME.
_PROGRAM_SET_ENV = {var.name for var in contract.ALL} | set(PROGRAM_ENV)
_NOT_A_PROGRAM_VARIABLE = "a name the program does not set (this one comes from the env contract)"


@_on_valid("env")
def _env_names_are_the_users(valid: dict[str, Any]) -> list[Problem]:
    env = valid["env"]
    return [Problem(full_key(["env", name]), repr(env[name]), _NOT_A_PROGRAM_VARIABLE) for name in env if name in _PROGRAM_SET_ENV]


@_on_valid("secretEnv")
def _secret_env_names_are_the_users_and_their_own(valid: dict[str, Any]) -> list[Problem]:
    problems = []
    for name in valid["secretEnv"]:
        if name in _PROGRAM_SET_ENV:
            problems.append(Problem(full_key(["secretEnv", name]), NOT_SHOWN, _NOT_A_PROGRAM_VARIABLE))
        elif name in valid.get("env", {}):
            problems.append(Problem(
                full_key(["secretEnv", name]), NOT_SHOWN, "a name not in env too (a variable has one value)",
            ))  # fmt: skip
    return problems


# Every rule about several keys, in the order their problems are reported.
CROSS_KEY_RULES: tuple[Rule, ...] = (
    _one_process_per_gpu,
    _each_claim_admits_every_pod,
    _shm_fits_in_the_memory_limit,
    _rdma_resources_are_asked_for_once,
    _jobset_pod_names_are_dns_labels,
    _kueue_admits_jobs,
    _topology_slices_divide_the_pods,
    _kubernetes_gang_is_one_job_of_every_pod,
    _elastic_world_forms_from_any_pods,
    _liveness_has_a_port_of_its_own,
    _spare_pods_take_any_pods_place,
    _secondary_networks_write_their_annotation,
    _labels_are_the_users,
    _env_names_are_the_users,
    _secret_env_names_are_the_users_and_their_own,
)


def cross_key_problems(valid: dict[str, Any]) -> list[Problem]:
    """Rules about whole keys or several keys at once; each runs only on keys that are valid."""
    return [problem for rule in CROSS_KEY_RULES for problem in rule(valid)]
