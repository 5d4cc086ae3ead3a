"""Gang admission (`scheduling.gang`): the whole world is admitted at once, or none of it.

Scheduled pod by pod, half of a 64-pod world can hold its GPUs for the whole rendezvous timeout
while the rest waits for capacity, and two such worlds can hold each other's halves for ever.

- **Kueue** admits a workload as one unit against its ClusterQueue's quota. The Job or JobSet
  carries the queue's label and is created suspended: no pod exists until Kueue has reserved
  quota for every one of them and lifts the suspension (what Kueue's own webhook would do to a
  Job it manages; written here so that the manifest says what happens). A StatefulSet is refused
  with Kueue: its pods outlive the run and would be admitted again one by one.
- **Volcano** schedules pods named by a PodGroup: its scheduler binds `minMember` of them
  together, or none. The pods ask for Volcano's scheduler and name the group; the group asks for
  the world's whole resources, so that Volcano enqueues it only when its queue can hold it.
- The **Kubernetes scheduler** binds the pods of a PodGroup with a gang policy all at once, or
  none: the Workload API, which `pulumi preview` asks the cluster for (ddp_infra/cluster_apis.py),
  and which the stack writes as the cluster serves it.
  - `scheduling.k8s.io/v1beta1` (Kubernetes 1.37): the stack writes a Workload of one PodGroup
    template, gang of `minCount` = the world's minimum (an elastic world's MIN; spares outside it),
    and hands its PodGroup to the Job controller (`WorkloadWithJob`): the Job names the template
    (`scheduling.k8s.io/group-template-name`) and is controlled by the object the Workload's
    `controllerRef` names, the Workload itself for a Job, the JobSet for a JobSet's Job. The Job
    controller then makes the PodGroup and puts each pod in it. The Job does not carry the gang
    itself (1.37's `spec.scheduling`), nor its pods a `schedulingGroup`: the pinned Kubernetes
    provider drops both (it normalizes a Job through the Kubernetes 1.33 types it was built with).
    Once the gang is bound, pods past MIN are left to the scheduler one by one, bound as room
    appears (tests/cluster/test_cluster_workload_api.py). A new minimum changes the Workload in
    place; a new kind replaces it (its controllerRef cannot change: components/trainer.py).
  - `scheduling.k8s.io/v1alpha2` (1.36): the Job controller makes the PodGroup itself of an
    Indexed Job whose parallelism equals its completions and is above 1, of every pod; the stack
    writes nothing for it, and an elastic world or spare pods are refused (their gang would be
    every pod up to the maximum).
  A StatefulSet is refused with this scheduler: no controller makes its pods a PodGroup.
- An **elastic** world (`nodes: MIN:MAX`) is admitted whole at its minimum and grows as room
  appears: Volcano's `minMember` is MIN, the Kubernetes scheduler's gang (v1beta1) is MIN. Kueue
  is refused (the config's rules): it admits a world once, at a size it keeps. A Job's spare pods
  (`workload.sparePods`) are admitted by Kueue's partial admission (as many pods as the quota
  holds, at least `nodes`, Kueue lowering the Job's parallelism to that); a JobSet's are admitted
  with it, whole.
- **Topology** (`scheduling.topology`, Kueue only): the pod template names a level of the Kueue
  Topology its ResourceFlavor points to, and Kueue admits the world once one domain of that level
  (a rack, a block) can hold every pod (`required`), or places it in as few as it can
  (`preferred`), each slice of `slice.size` pods (where asked) within one domain of a lower
  level; it then gates the pods to the nodes it chose.

Pure functions of the `World`, like ddp_infra.pod and ddp_infra.workload, which call them.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal
from typing import Any

from trainer import contract

from .config import parse_quantity
from .names import JOBSET_API_VERSION, WORKLOAD_API_BETA
from .world import World

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
KUEUE_MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"  # Kueue's partial admission
# Kueue's topology-aware scheduling: the pod template's annotation names the level its pods stay within.
KUEUE_TOPOLOGY_ANNOTATIONS = {
    "required": "kueue.x-k8s.io/podset-required-topology",
    "preferred": "kueue.x-k8s.io/podset-preferred-topology",
}
# ...and, for slices of the world, the lower level each slice stays within, and its size in pods.
KUEUE_SLICE_LEVEL_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE_ANNOTATION = "kueue.x-k8s.io/podset-slice-size"
VOLCANO_SCHEDULER = "volcano"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
POD_GROUP_API_VERSION = "scheduling.volcano.sh/v1beta1"
# A Job's annotation that hands the PodGroup of a Workload's template to the Job controller.
GROUP_TEMPLATE_ANNOTATION = "scheduling.k8s.io/group-template-name"
GROUP_TEMPLATE_NAME = "world"
# How the program says what the world's scheduler will do with it (admission), at preview and up.
ADMISSION_PREFIX = "admission: "
BYTE_RESOURCES = ("memory", "ephemeral-storage")


def uses(world: World, scheduler: str) -> bool:
    return world.config.scheduling.gang.scheduler == scheduler


def workload_labels(world: World) -> dict[str, str]:
    """Labels of the Job or JobSet that put it in its Kueue queue."""
    gang = world.config.scheduling.gang
    if gang.scheduler != "kueue":
        return {}
    labels = {KUEUE_QUEUE_LABEL: gang.queue}
    if gang.workload_priority_class:
        labels[KUEUE_PRIORITY_LABEL] = gang.workload_priority_class
    return labels


def workload_annotations(world: World) -> dict[str, str]:
    """The Kueue annotation of a Job whose world forms from any of its pods (with spares; an elastic
    world is refused with Kueue): Kueue may admit it partly, as many pods as its quota holds and at
    least the world's minimum (Kueue then lowers the Job's parallelism to that)."""
    if not (uses(world, "kueue") and world.forms_from_any_pods and world.workload_kind == contract.INDEXED_JOB):
        return {}
    return {KUEUE_MIN_PARALLELISM_ANNOTATION: str(world.min_nodes)}


def fewest_pods_admitted(world: World) -> int:
    """The fewest pods the world is admitted with: its minimum, but every pod of a JobSet under
    Kueue, which admits a JobSet whole, its spares with it."""
    if uses(world, "kueue") and world.workload_kind == contract.JOBSET:
        return world.pods
    return world.min_nodes


def starts_suspended(world: World) -> bool:
    """A Job or JobSet that Kueue admits starts suspended: Kueue lifts it once the world fits."""
    return uses(world, "kueue")


def pod_scheduling(world: World) -> tuple[dict[str, Any], dict[str, str]]:
    """(pod spec fields, pod annotations) that hand the pods to Volcano's scheduler as one group,
    or ask Kueue to place them within one domain of a topology level."""
    if uses(world, "volcano"):
        return {"schedulerName": VOLCANO_SCHEDULER}, {VOLCANO_GROUP_ANNOTATION: world.pod_group_name}
    topology = world.config.scheduling.topology
    if topology is None:
        return {}, {}
    annotations = {KUEUE_TOPOLOGY_ANNOTATIONS[topology.mode]: topology.level}
    if topology.slice is not None:
        annotations |= {KUEUE_SLICE_LEVEL_ANNOTATION: topology.slice.level, KUEUE_SLICE_SIZE_ANNOTATION: str(topology.slice.size)}
    return {}, annotations


def writes_workload(world: World) -> bool:
    """Whether the stack writes the Workload of the Kubernetes scheduler's gang (v1beta1)."""
    return uses(world, "kubernetes") and world.workload_api == WORKLOAD_API_BETA


def workload_api_manifest(world: World) -> dict[str, Any]:
    """The Workload of the world's gang: one PodGroup template of `minCount` = the world's minimum,
    controlled by what controls the world's Job (the Workload itself, or the JobSet)."""
    if world.workload_kind == contract.JOBSET:
        controller = {"apiGroup": JOBSET_API_VERSION.split("/")[0], "kind": "JobSet", "name": world.workload_name}
    else:
        controller = {"apiGroup": WORKLOAD_API_BETA.split("/")[0], "kind": "Workload", "name": world.pod_group_name}
    template = {"name": GROUP_TEMPLATE_NAME, "schedulingPolicy": {"gang": {"minCount": world.min_nodes}}}
    return {"apiVersion": WORKLOAD_API_BETA, "kind": "Workload", "metadata": _group_metadata(world),
            "spec": {"controllerRef": controller, "podGroupTemplates": [template]}}  # fmt: skip


def job_annotations(world: World) -> dict[str, str]:
    """The world's Job's annotation that has the Job controller make the PodGroup of the Workload's template."""
    return {GROUP_TEMPLATE_ANNOTATION: GROUP_TEMPLATE_NAME} if writes_workload(world) else {}


def workload_controls_job(world: World) -> bool:
    """Whether the world's Job is controlled by its gang's Workload (a JobSet's Job is the JobSet's)."""
    return writes_workload(world) and world.workload_kind == contract.INDEXED_JOB


def workload_owner(world: World, uid: str) -> list[dict[str, Any]]:
    """The ownerReferences of a Job that the Workload of uid `uid` controls."""
    return [{"apiVersion": WORKLOAD_API_BETA, "kind": "Workload", "name": world.pod_group_name, "uid": uid, "controller": True}]


def pod_group_manifest(world: World, pod_template: dict[str, Any]) -> dict[str, Any]:
    """Volcano's PodGroup of the world: all `nodes` pods or none, asking for all their requests (an
    elastic world: at least its minimum)."""
    spec: dict[str, Any] = {
        "minMember": world.min_nodes,
        "minResources": {name: quantity_text(amount * world.min_nodes) for name, amount in pod_requests(pod_template).items()},
    }
    scheduling = world.config.scheduling
    if scheduling.gang.queue:
        spec["queue"] = scheduling.gang.queue
    if scheduling.priority_class_name:
        spec["priorityClassName"] = scheduling.priority_class_name
    return {"apiVersion": POD_GROUP_API_VERSION, "kind": "PodGroup", "metadata": _group_metadata(world), "spec": spec}


def _group_metadata(world: World) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": world.pod_group_name, "namespace": world.namespace, "labels": world.labels("gang")}
    if world.extra_annotations:
        metadata["annotations"] = dict(world.extra_annotations)
    return metadata


def pod_requests(pod_template: dict[str, Any]) -> dict[str, Decimal]:
    """What one pod requests, as the scheduler counts it: its containers and native sidecars
    together, or an init container that runs alone (beside the sidecars) if that asks for more."""
    spec = pod_template["spec"]
    init = spec.get("initContainers") or []
    sidecars = [c for c in init if c.get("restartPolicy") == "Always"]
    running = _sum([*spec["containers"], *sidecars])
    for container in init:
        if container.get("restartPolicy") != "Always":
            alone = _sum([container, *sidecars])
            running = {name: max(running.get(name, Decimal(0)), alone.get(name, Decimal(0))) for name in {*running, *alone}}
    return dict(sorted(running.items()))


def _sum(containers: list[dict[str, Any]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for container in containers:
        resources = container.get("resources") or {}
        # the API server sets an unset request to the limit
        for name, quantity in {**(resources.get("limits") or {}), **(resources.get("requests") or {})}.items():
            total[name] = total.get(name, Decimal(0)) + parse_quantity(str(quantity))
    return total


def amount_text(resource: str, amount: Decimal) -> str:
    """As a person writes it: bytes in Gi or Mi where they divide, CPUs in millis where fractional."""
    if resource in BYTE_RESOURCES:
        for suffix, unit in (("Gi", 2**30), ("Mi", 2**20)):
            if amount % unit == 0:
                return f"{int(amount // unit)}{suffix}"
    return quantity_text(amount)


def quantity_text(amount: Decimal) -> str:
    """A quantity written exactly: whole base units, or millis where it has a fraction."""
    if amount == amount.to_integral_value():
        return str(int(amount))
    return f"{int((amount * 1000).to_integral_value(rounding=ROUND_CEILING))}m"


def admission(world: World) -> str:
    """What the world's scheduler will do with it, as the preview says it: how many pods start
    together, whether it grows after, and what a lost pod costs."""
    n, least, spares = world.nnodes, world.min_nodes, world.spare_pods
    spare_text = f" (and its {spares} spare pod(s))" if spares else ""
    scheduler = world.config.scheduling.gang.scheduler
    if scheduler == "kueue":
        queue = world.config.scheduling.gang.queue
        if world.workload_kind == contract.JOBSET or not world.forms_from_any_pods:
            started = f"Kueue admits it whole against LocalQueue {queue}'s quota: its {world.pods} pods at once, or none"
        else:
            started = (f"Kueue admits it against LocalQueue {queue}'s quota with as many of its {world.pods} pods as the quota "
                       f"holds, at least {least}, or none, and keeps that size")  # fmt: skip
    elif scheduler == "volcano":
        if world.forms_from_any_pods:
            started = f"Volcano binds {least} of its {world.pods} pods together (minMember), or none; the rest{spare_text} as room appears"
        else:
            started = f"Volcano binds its {world.pods} pods together (minMember), or none"
    elif scheduler == "kubernetes":
        binder = f"the Kubernetes scheduler ({world.workload_api}) binds"
        if world.forms_from_any_pods and world.workload_api == WORKLOAD_API_BETA:
            started = f"{binder} {least} pods together, or none; the rest{spare_text} as room appears"
        else:
            started = f"{binder} its {world.pods} pods together, or none"
    else:
        started = f"its pods are scheduled one by one; it trains once {least} of them run"
    shape = f"admitted at {least}, growing to {n}" if world.elastic else f"a world of {n}"
    if spares:
        lost = "a lost pod: a spare takes its place, and the world resumes from its last checkpoint"
    elif world.elastic:
        lost = f"a lost pod: the world goes on without it, at no fewer than {least}, from its last checkpoint, and grows back once it is replaced"
    else:
        lost = "a lost pod: the world waits for its replacement and resumes from its last checkpoint"
    return f"{shape}: {started}; {lost}"
