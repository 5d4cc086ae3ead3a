"""The whole stack's config: `StackConfig` and its small sections (image, namespace, the Kubernetes
connection). The rules about several keys at once are in cross_key_rules.py."""

from __future__ import annotations

import re
from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, Field, model_validator

from .network import NetworkConfig, RendezvousConfig
from .nodes import NodeCount, NodeRange
from .pod import PodConfig
from .resources import ResourcesConfig
from .scheduling import SchedulingConfig
from .scalars import (
    Bytes, DnsLabel, DnsSubdomain, EnvName, ImageReference, LabelKey, LabelValue, Model, SecretEnvName, SecretString,
    field_problem,
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
