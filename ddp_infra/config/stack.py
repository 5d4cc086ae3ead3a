"""The whole stack's config: `StackConfig`, its small sections (image, namespace, the Kubernetes
connection), and the rules about several keys at once (`cross_key_problems`)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, Field, model_validator

from trainer import contract

from ..names import PROGRAM_ENV, RESERVED_LABEL_PREFIX, SECONDARY_NETWORKS_ANNOTATION
from .network import NetworkConfig, RendezvousConfig
from .nodes import NodeCount, NodeRange
from .pod import NOT_A_JOB_CONTROLLER_LABEL, PodConfig, is_job_controller_label
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


def cross_key_problems(valid: dict[str, Any]) -> list[Problem]:
    """Rules about whole keys or several keys at once; each runs only on keys that are valid."""
    problems: list[Problem] = []

    def have(*keys: str) -> bool:
        return all(key in valid for key in keys)

    if have("gpusPerNode", "procsPerNode"):
        gpus, procs = valid["gpusPerNode"], valid["procsPerNode"]
        if gpus and procs and procs != gpus:
            problems.append(Problem(
                full_key(["procsPerNode"]), repr(procs),
                f"0 or {gpus} (one process per GPU: fewer leaves GPUs idle, more makes NCCL share a GPU)",
            ))
    if have("nodes", "storage"):
        for role, volume in valid["storage"].volumes().items():
            if volume.access_mode == "ReadWriteOncePod" and valid["nodes"].maximum > 1:
                problems.append(Problem(
                    full_key(["storage", role, "accessMode"]), repr(volume.access_mode),
                    "ReadWriteMany, ReadOnlyMany or ReadWriteOnce when nodes > 1 (ReadWriteOncePod admits one pod)",
                ))
    if have("shmSize", "resources"):
        limit = valid["resources"].limits.memory
        if limit and parse_quantity(valid["shmSize"]) >= parse_quantity(limit):
            problems.append(Problem(
                full_key(["shmSize"]), repr(valid["shmSize"]),
                f"less than resources.limits.memory ({limit}): /dev/shm is memory and counts against it",
            ))
    if have("network", "resources"):
        for name in valid["network"].rdma_resources:
            if valid["network"].infiniband and name in valid["resources"].extended:
                problems.append(Problem(
                    full_key(["resources", "extended", name]), repr(valid["resources"].extended[name]),
                    "a resource not in network.rdmaResources (that key requests it already)",
                ))
    if have("workload", "nodes") and valid["workload"].kind == contract.JOBSET:
        # JobSet refuses a JobSet whose pod names (<name>-node-0-<index>-<5 random>) are not DNS-1035
        # labels (a workload name starts with a letter whatever its kind: its Service's name is one too).
        name, nodes = valid["workload"].name, valid["nodes"].maximum
        fixed = len(contract.pod_hostname(contract.JOBSET, name, nodes - 1)) + len("-abcde") - len(name)
        if len(name) + fixed > 63:
            problems.append(Problem(
                full_key(["workload", "name"]), repr(name),
                f"with kind jobset, a name of at most {63 - fixed} characters at nodes={nodes} "
                f"(its pods are named <name>-{contract.JOBSET_REPLICATED_JOB}-0-<index>-<5 random>, at most 63)",
            ))
    if have("workload", "scheduling") and valid["scheduling"].gang.scheduler == "kueue":
        if valid["workload"].kind == contract.STATEFULSET:
            problems.append(Problem(
                full_key(["scheduling", "gang", "scheduler"]), repr("kueue"),
                "none or volcano with workload.kind statefulset (Kueue admits a Job or a JobSet as one workload; "
                "set workload.kind to job or jobset)",
            ))
    if have("workload", "nodes", "scheduling") and valid["scheduling"].topology and valid["scheduling"].topology.slice:
        problems += _topology_slice_problems(valid)
    if have("workload", "nodes", "scheduling") and valid["scheduling"].gang.scheduler == "kubernetes":
        problems += _kubernetes_gang_problems(valid)
    if have("nodes") and valid["nodes"].elastic:
        problems += _elastic_world_problems(valid)
    if have("workload", "rendezvous") and valid["workload"].liveness.seconds:
        port = valid["workload"].liveness.port
        if port == valid["rendezvous"].port:
            problems.append(Problem(
                full_key(["workload", "liveness", "port"]), repr(port),
                f"a port other than rendezvous.port ({port}): the entrypoint answers the kubelet's probe on its own port",
            ))
    if have("workload") and valid["workload"].spare_pods:
        problems += _spare_pods_problems(valid)
    if have("network", "annotations") and valid["network"].secondary_networks:
        if SECONDARY_NETWORKS_ANNOTATION in valid["annotations"]:
            problems.append(Problem(
                full_key(["annotations", SECONDARY_NETWORKS_ANNOTATION]), repr(valid["annotations"][SECONDARY_NETWORKS_ANNOTATION]),
                "no value here when network.secondaryNetworks is set (it writes this annotation)",
            ))
    if have("labels"):
        for key in valid["labels"]:
            if key.startswith(RESERVED_LABEL_PREFIX):
                problems.append(Problem(
                    full_key(["labels", key]), repr(valid["labels"][key]),
                    f"a key outside {RESERVED_LABEL_PREFIX} (the program sets those and selects on them)",
                ))
            elif is_job_controller_label(key):
                problems.append(Problem(full_key(["labels", key]), repr(valid["labels"][key]), NOT_A_JOB_CONTROLLER_LABEL))
    reserved = {var.name for var in contract.ALL} | set(PROGRAM_ENV)
    if have("env"):
        for name in valid["env"]:
            if name in reserved:
                problems.append(Problem(
                    full_key(["env", name]), repr(valid["env"][name]),
                    "a name the program does not set (this one comes from the env contract)",
                ))
    if have("secretEnv"):
        for name in valid["secretEnv"]:
            if name in reserved:
                problems.append(Problem(
                    full_key(["secretEnv", name]), NOT_SHOWN,
                    "a name the program does not set (this one comes from the env contract)",
                ))
            elif name in valid.get("env", {}):
                problems.append(Problem(
                    full_key(["secretEnv", name]), NOT_SHOWN, "a name not in env too (a variable has one value)",
                ))
    return problems


def _topology_slice_problems(valid: dict[str, Any]) -> list[Problem]:
    """Kueue places the Job's pods in slices of `size`: a count it knows, which they divide."""
    size, nodes = valid["scheduling"].topology.slice.size, valid["nodes"]
    key = full_key(["scheduling", "topology", "slice", "size"])
    if nodes.elastic:
        return [Problem(key, repr(size), f"unset with an elastic world, nodes {nodes} (Kueue admits it partly: its slices would not add up)")]
    pods = nodes.maximum + valid["workload"].spare_pods
    if pods % size:
        return [Problem(key, repr(size), f"a divisor of the Job's {pods} pods (nodes and workload.sparePods), such as 1 or {pods}")]
    return []


def _kubernetes_gang_problems(valid: dict[str, Any]) -> list[Problem]:
    """What the Kubernetes scheduler's gang needs: a Job whose controller makes it a PodGroup, one
    of all its pods (ddp_infra/gang.py)."""
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


def _elastic_world_problems(valid: dict[str, Any]) -> list[Problem]:
    """What an elastic world (nodes MIN:MAX) needs: pods any subset of which can form it, and a
    scheduler that admits part of it."""
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


def _spare_pods_problems(valid: dict[str, Any]) -> list[Problem]:
    """What spare pods need: a world formed from whichever pods join first, and a workload whose
    lost pods are replaced one by one."""
    problems: list[Problem] = []
    spares = valid["workload"].spare_pods
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


_RENDEZVOUS_APART = "rendezvous.backend c10d with store own-pod (the defaults), or etcd-v2"


def _rendezvous_on_pod_0(valid: dict[str, Any]) -> str | None:
    """The setting that puts the store on pod 0 (RendezvousConfig.store_on_pod_0), so that no world
    forms without it ("backend static" or "store pod-0"); None where it lives apart."""
    rendezvous = valid.get("rendezvous")
    if rendezvous is None or not rendezvous.store_on_pod_0:
        return None
    return "backend static" if rendezvous.backend == "static" else "store pod-0"
