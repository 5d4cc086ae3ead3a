"""`scheduling`: where the pods may run, and gang admission of the whole world."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from .scalars import DNS_SUBDOMAIN_RE, DnsLabel, DnsSubdomain, LabelKey, LabelValue, Model, field_problem, pattern

# Pulumi carries every number as a 64-bit float, exact up to 2^53 - 1; the API server refuses
# what an int64 cannot hold.
MAX_EXACT_NUMBER = 2**53 - 1


# Node labels Kubernetes deprecated, which the API server warns about in a pod's nodeSelector and
# topology spread (pkg/api/node/util.go), and what replaces each.
DEPRECATED_NODE_LABELS = {
    "beta.kubernetes.io/arch": "kubernetes.io/arch",
    "beta.kubernetes.io/os": "kubernetes.io/os",
    "beta.kubernetes.io/instance-type": "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "node-role.kubernetes.io/master": "node-role.kubernetes.io/control-plane",
    "scheduler.alpha.kubernetes.io/preferAvoidPods": "taints and tolerations",
    "app.kubernetes.io/created-by": None,
}


def _not_deprecated(key: str) -> str:
    if key in DEPRECATED_NODE_LABELS:
        instead = DEPRECATED_NODE_LABELS[key]
        allowed = "a node label Kubernetes has not deprecated" + (f" (use {instead})" if instead else "")
        raise PydanticCustomError("pattern", "{allowed}", {"allowed": allowed})
    return key


_not_deprecated.allowed = "not a deprecated node label such as beta.kubernetes.io/arch"  # type: ignore[attr-defined]
NodeLabelKey = Annotated[LabelKey, AfterValidator(_not_deprecated)]


class Toleration(Model):
    key: Optional[LabelKey] = Field(None, description="Taint key (unset with Exists: every taint).")
    operator: Literal["Exists", "Equal"] = Field("Equal", description="How value is matched.")
    value: Optional[LabelValue] = Field(None, description="Taint value (Equal only).")
    effect: Optional[Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]] = Field(
        None, description="Taint effect (unset: every effect)."
    )
    toleration_seconds: Optional[int] = Field(
        None, ge=0, le=MAX_EXACT_NUMBER, description="NoExecute: seconds the pod stays."
    )

    @model_validator(mode="after")
    def _fields_agree(self) -> "Toleration":
        """As the API server's ValidateTolerations has them."""
        if self.operator == "Exists" and self.value:
            raise field_problem(("value",), "unset when operator is Exists", self.value)
        if not self.key and self.operator != "Exists":
            raise field_problem(("key",), "a taint key when operator is Equal (only Exists, without a key, tolerates every taint)", self.key)
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise field_problem(("effect",), "NoExecute when tolerationSeconds is set (how long the pod stays on a node tainted NoExecute)", self.effect)
        return self


class TopologySpreadConfig(Model):
    enabled: bool = Field(True, description="Spread pods over topologyKey.")
    topology_key: NodeLabelKey = Field("kubernetes.io/hostname", description="Node label to spread over.")
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


GANG_SCHEDULERS = ("none", "kueue", "volcano", "kubernetes")
# A WorkloadPriorityClass is named by a label on the workload (kueue.x-k8s.io/priority-class): a
# DNS subdomain that is also a label value, so of at most 63 characters.
WorkloadPriorityClassName = Annotated[
    str,
    AfterValidator(
        pattern(rf"(?=.{{1,63}}$){DNS_SUBDOMAIN_RE}", "a DNS-1123 subdomain of at most 63 characters, a label's value: lowercase a-z, 0-9, '-', '.'")
    ),
]


class GangConfig(Model):
    """Gang admission: the whole world is admitted at once, or none of it (ddp_infra/gang.py)."""

    scheduler: Literal[GANG_SCHEDULERS] = Field(  # type: ignore[valid-type]
        "none",
        description="none (pods are scheduled one by one), kueue (the workload waits suspended in a Kueue LocalQueue until its whole quota is free, a Job with spare pods until its world's is; no elastic world, which Kueue would never grow; kinds job and jobset), volcano (Volcano's scheduler binds all the pods of a PodGroup of minMember = nodes, or none; an elastic world's minimum, the rest as room appears) or kubernetes (the Kubernetes scheduler's own gang scheduling, through the Workload API the cluster serves: on scheduling.k8s.io/v1beta1, Kubernetes 1.37 with the GenericWorkload and WorkloadWithJob feature gates, the stack writes a Workload whose gang is the world's minimum, an elastic world's MIN, and the world grows past it as room appears; on scheduling.k8s.io/v1alpha2, Kubernetes 1.36 with GangScheduling too, the Job controller gangs every pod, so no elastic world and no spare pods; kinds job and jobset).",
    )
    queue: Optional[DnsLabel] = Field(
        None, description="kueue: the LocalQueue in the stack's namespace (required); volcano: the Queue (unset: Volcano's default)."
    )
    workload_priority_class: Optional[WorkloadPriorityClassName] = Field(
        None, description="kueue: a WorkloadPriorityClass, the world's priority in its queue (the pods keep scheduling.priorityClassName)."
    )

    @model_validator(mode="after")
    def _scheduler_has_what_it_needs(self) -> "GangConfig":
        if self.scheduler == "kueue" and not self.queue:
            raise field_problem(("queue",), "the name of a LocalQueue in the stack's namespace (required with scheduler kueue)", None)
        if self.scheduler in ("none", "kubernetes") and self.queue:
            raise field_problem(("queue",), f"unset with scheduler {self.scheduler} (queues are Kueue's and Volcano's: set scheduler to kueue or volcano)", self.queue)
        if self.scheduler != "kueue" and self.workload_priority_class:
            raise field_problem(
                ("workloadPriorityClass",), "unset unless scheduler is kueue (a Kueue WorkloadPriorityClass)", self.workload_priority_class
            )
        return self


TOPOLOGY_MODES = ("required", "preferred")


class TopologySliceConfig(Model):
    """Slices of the world that Kueue places each within one domain of a lower level (Kueue's
    topology-aware scheduling with slices, 0.14 and later)."""

    level: NodeLabelKey = Field(description="The node label of the level each slice stays within (e.g. a rack, where the world is larger than one).")
    size: int = Field(ge=1, le=1024, description="Pods per slice: it divides the Job's pods (nodes, and spare pods), each slice within one domain of that level.")


class TopologyConfig(Model):
    """Where Kueue places the world's pods: within one domain of a level of its Topology
    (topology-aware scheduling, ddp_infra/gang.py)."""

    level: NodeLabelKey = Field(
        description="The node label of a level of the Kueue Topology that the queue's ResourceFlavor names (e.g. a rack's or a block's label).",
    )
    mode: Literal[TOPOLOGY_MODES] = Field(  # type: ignore[valid-type]
        "required",
        description="required: Kueue admits the world only once one domain of that level can hold all its pods; preferred: in as few domains as it can.",
    )
    slice: Optional[TopologySliceConfig] = Field(
        None, description="Where the world is larger than one domain of a lower level: slices of it, each within one such domain (a rack within the block)."
    )


class SchedulingConfig(Model):
    node_selector: dict[NodeLabelKey, LabelValue] = Field({}, description="Pod nodeSelector.")
    tolerations: tuple[Toleration, ...] = Field((), description="Pod tolerations.")
    affinity: Annotated[Optional[dict[str, Any]], AfterValidator(_check_affinity)] = Field(
        None, description="Pod affinity, as Kubernetes writes it (nodeAffinity, podAffinity, podAntiAffinity)."
    )
    priority_class_name: Optional[DnsSubdomain] = Field(None, description="PriorityClass of the pods.")
    topology_spread: TopologySpreadConfig = Field(TopologySpreadConfig(), description="Topology spread of the pods.")
    gang: GangConfig = Field(GangConfig(), description="Gang admission of the whole world: Kueue, Volcano or the Kubernetes scheduler.")
    topology: Optional[TopologyConfig] = Field(
        None,
        description="kueue: place the world's pods within one domain of a topology level (a rack, a block), where NCCL's bandwidth is; Kueue's topology-aware scheduling.",
    )
    fit_check: Literal["refuse", "warn", "off"] = Field(
        "refuse",
        description="Before anything is created: refuse (or warn about) a world whose pods the cluster's nodes can never hold at once, or its gang scheduler's queue never admit (ddp_infra/fit.py; a cluster with an autoscaler only gets a warning about its nodes).",
    )

    @model_validator(mode="after")
    def _topology_is_kueues(self) -> "SchedulingConfig":
        if self.topology is not None and self.gang.scheduler != "kueue":
            raise field_problem(
                ("topology", "level"),
                "unset unless scheduling.gang.scheduler is kueue (topology-aware placement is Kueue's: set the scheduler to kueue)",
                self.topology.level,
            )
        return self
