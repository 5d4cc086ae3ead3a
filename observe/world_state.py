"""The world as the cluster shows it in one look: its pods by index, whether the workload ended, why
anything waits (not scheduled, image not there, a queue holding the world), and the nodes lost
under its pods."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

from trainer import contract

from .kubectl import Kubectl

KUEUE_WORKLOADS = "workloads.kueue.x-k8s.io"
VOLCANO_POD_GROUPS = "podgroups.scheduling.volcano.sh"
KUBERNETES_POD_GROUPS = "podgroups.scheduling.k8s.io"  # the Workload API's, made by the Job controller
# Its condition that says whether the scheduler placed the gang: 1.37's (v1beta1), 1.36's (v1alpha2).
POD_GROUP_SCHEDULED = ("PodGroupInitiallyScheduled", "PodGroupScheduled")
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"

TRAINER_CONTAINER = "trainer"
POD_CREATING_KINDS = ("Job", "StatefulSet", "JobSet")  # the kinds whose controllers create the world's pods (a JobSet's Jobs)
NOT_SCHEDULED = "not scheduled: "  # how a pod the scheduler has not placed waits


@dataclass(frozen=True)
class WorldRef:
    """Which world to look at: the workload (kind and name, as the stack outputs give them) and the
    label selector of its pods."""

    kind: str
    name: str
    selector: str
    container: str = TRAINER_CONTAINER

    @property
    def api_kind(self) -> str:
        return "jobset.jobset.x-k8s.io" if self.kind == contract.JOBSET else self.kind


@dataclass(frozen=True)
class PodState:
    name: str
    uid: str
    index: int
    phase: str
    restarts: int
    waiting: Optional[str]  # why it does not run yet, in the cluster's words
    last_exit: Optional[str]  # how its previous container ended
    deleting: bool
    created: str
    node: Optional[str] = None  # the node it was bound to

    @property
    def live(self) -> bool:
        return not self.deleting and self.phase not in ("Failed", "Succeeded")


@dataclass(frozen=True)
class WorldState:
    pods: tuple[PodState, ...]  # every pod of the world, oldest first
    ended: Optional[str]  # "Complete", or "Failed: <why>"; None while the workload runs
    held: Optional[str]  # why the workload itself waits (a queue has not admitted it)
    claims: tuple[str, ...] = ()  # why claims an unscheduled pod needs do not bind
    # Nodes under live pods that are not Ready or are gone: the API may still call those pods
    # Running while nothing of them runs.
    lost_nodes: tuple[str, ...] = ()
    # Why the workload's controller could not create a pod it wants (a quota, a PodSecurity or an
    # admission policy's refusal), in its newest FailedCreate event.
    cannot_create: Optional[str] = None
    exists: bool = True  # False: the workload is not in the cluster (deleted, or a finished one past its TTL)

    @property
    def live_pods(self) -> dict[int, PodState]:
        return {pod.index: pod for pod in self.pods if pod.live}

    def runs_as(self, nodes: int) -> bool:
        """One running pod for each index of a world of `nodes`."""
        live = self.live_pods
        return sorted(live) == list(range(nodes)) and all(pod.phase == "Running" for pod in live.values())

    def rank0_pod(self) -> Optional[PodState]:
        """Pod 0, the newest one (a Job replaces a failed pod with another of the same index)."""
        zeros = [pod for pod in self.pods if pod.index == 0]
        return zeros[-1] if zeros else None

    def waits(self) -> list[str]:
        found = [f"pod {pod.index} ({pod.name}): {pod.waiting}" for pod in self.pods if pod.live and pod.waiting]
        refused = [f"cannot create pods: {self.cannot_create}"] if self.cannot_create else []
        return ([self.held] if self.held else []) + refused + found + list(self.claims)


def read_world(kubectl: Kubectl, world: WorldRef) -> WorldState:
    pods = sorted(kubectl.items("pods", world.selector), key=lambda p: p["metadata"]["creationTimestamp"])
    workload = kubectl.find(world.api_kind, world.name)
    states = tuple(state for pod in pods if (state := pod_state(pod, world.container)) is not None)
    return WorldState(
        pods=states,
        ended=_ended(world.kind, workload),
        held=_held(kubectl, world, workload, pods),
        claims=tuple(_claims_not_binding(kubectl, pods)),
        lost_nodes=tuple(_lost_nodes_read(kubectl, states)),
        cannot_create=_cannot_create_read(kubectl, world, workload, states),
        exists=workload is not None,
    )


def pod_state(pod: dict[str, Any], container: str) -> Optional[PodState]:
    metadata, status = pod["metadata"], pod.get("status", {})
    index = metadata.get("annotations", {}).get(contract.JOB_COMPLETION_INDEX_ANNOTATION,
                                                metadata.get("labels", {}).get(contract.POD_INDEX_LABEL))  # fmt: skip
    if index is None:
        return None
    ours = [s for s in status.get("containerStatuses") or [] if s["name"] == container]
    return PodState(
        name=metadata["name"], uid=metadata["uid"], index=int(index), phase=status.get("phase", "Pending"),
        restarts=ours[0].get("restartCount", 0) if ours else 0, waiting=why_waiting(status),
        last_exit=_exit(ours[0].get("lastState", {}).get("terminated")) if ours else None,
        deleting="deletionTimestamp" in metadata, created=metadata["creationTimestamp"], node=pod.get("spec", {}).get("nodeName"),
    )  # fmt: skip


def why_waiting(status: dict[str, Any]) -> Optional[str]:
    """Why a pod does not run (yet), in the cluster's words: not scheduled, a failed init container, a waiting container."""
    for condition in status.get("conditions") or []:
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return f"{NOT_SCHEDULED}{condition.get('message') or condition.get('reason', '')}".strip()
    for container in status.get("initContainerStatuses") or []:
        # a Job's pod does not restart a failed init container: the pod fails, with its reason (and
        # its app containers wait, PodInitializing, for what will never come)
        terminated = container.get("state", {}).get("terminated") or {}
        if terminated.get("exitCode"):
            failed = _last_line(terminated)
            return f"{container['name']} failed (exit {terminated['exitCode']})" + (f": {failed}" if failed else "")
    for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = container.get("state", {}).get("waiting")
        if waiting:
            message = waiting.get("message", "")
            said = f"{container['name']} {waiting.get('reason', 'waiting')}" + (f": {message}" if message else "")
            failed = _last_line(container.get("lastState", {}).get("terminated"))
            return said + (f"; it failed: {failed}" if failed else "")
    return None


def _last_line(terminated: Optional[dict[str, Any]]) -> str:
    """The last line of a container's termination message (its log's, with FallbackToLogsOnError)."""
    lines = [line for line in ((terminated or {}).get("message") or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _exit(terminated: Optional[dict[str, Any]]) -> Optional[str]:
    if not terminated:
        return None
    return f"exit {terminated.get('exitCode')} ({terminated.get('reason', 'terminated')})"


def _ended(kind: str, workload: Optional[dict[str, Any]]) -> Optional[str]:
    if workload is None or kind == contract.STATEFULSET:  # a StatefulSet's pods never end: [DONE] says so
        return None
    status = workload.get("status", {})
    if kind == contract.JOBSET and status.get("terminalState"):
        state = status["terminalState"]
        return "Complete" if state == "Completed" else f"Failed: {_condition_message(status, 'Failed')}"
    for condition in status.get("conditions") or []:
        if condition["status"] == "True" and condition["type"] in ("Complete", "Failed"):
            return "Complete" if condition["type"] == "Complete" else f"Failed: {_describe(condition)}"
    return None


def _condition_message(status: dict[str, Any], kind: str) -> str:
    found = [c for c in status.get("conditions") or [] if c["type"] == kind and c["status"] == "True"]
    return _describe(found[0]) if found else kind


def _describe(condition: dict[str, Any]) -> str:
    return ": ".join(part for part in (condition.get("reason"), condition.get("message")) if part)


def kubernetes_pod_group_reason(group: dict[str, Any]) -> Optional[str]:
    """The Kubernetes scheduler's word on a PodGroup it could not place whole."""
    for condition in group.get("status", {}).get("conditions") or []:
        if condition["type"] in POD_GROUP_SCHEDULED and condition["status"] == "False":
            return f"the Kubernetes scheduler holds PodGroup {group['metadata']['name']} ({_describe(condition)})"
    return None


def _held(kubectl: Kubectl, world: WorldRef, workload: Optional[dict[str, Any]], pods: list[dict[str, Any]]) -> Optional[str]:
    """Why the workload itself waits, in its queue's or gang scheduler's own words where it has one
    (Kueue's Workload, Volcano's or the Kubernetes scheduler's PodGroup); None when nothing holds it."""
    if workload is None:
        return f"{world.kind} {world.name} does not exist (yet)"
    if workload.get("spec", {}).get("suspend"):
        said = kueue_reason(_readable(kubectl, KUEUE_WORKLOADS), workload["metadata"]["uid"])
        return f"{world.kind} {world.name} is suspended: " + (said or "a queue has not admitted the world yet")
    pending = [pod for pod in pods if pod.get("status", {}).get("phase", "Pending") == "Pending"]
    named_by_pods = (
        (VOLCANO_POD_GROUPS, {pod["metadata"].get("annotations", {}).get(VOLCANO_GROUP_ANNOTATION) for pod in pending}, pod_group_reason),
        (KUBERNETES_POD_GROUPS, {(pod.get("spec", {}).get("schedulingGroup") or {}).get("podGroupName") for pod in pending}, kubernetes_pod_group_reason),
    )
    for kind, names, reason in named_by_pods:
        if names - {None}:
            groups = sorted((g for g in _readable(kubectl, kind) if g["metadata"]["name"] in names), key=lambda g: g["metadata"]["name"])
            if said := next((said for group in groups if (said := reason(group))), None):
                return said
    return None


def wanted_pods(kind: str, workload: Optional[dict[str, Any]]) -> int:
    """How many pods the workload's controller keeps at once: a Job's parallelism, a StatefulSet's
    replicas, a JobSet's over its replicated Jobs."""
    spec = (workload or {}).get("spec", {})
    if kind == contract.STATEFULSET:
        return spec.get("replicas", 1)
    if kind == contract.JOBSET:
        return sum(job.get("replicas", 1) * job["template"]["spec"].get("parallelism", 1) for job in spec.get("replicatedJobs") or [])
    return spec.get("parallelism", 1)


def _cannot_create_read(kubectl: Kubectl, world: WorldRef, workload: Optional[dict[str, Any]], pods: tuple[PodState, ...]) -> Optional[str]:
    """Only looked for while the workload has fewer pods than it wants and no queue holds it."""
    live = sum(pod.live for pod in pods)
    if workload is None or workload.get("spec", {}).get("suspend") or live >= wanted_pods(world.kind, workload):
        return None
    events = _readable(kubectl, "events", "--field-selector", "reason=FailedCreate")
    return failed_create(world.name, events, [pod.created for pod in pods])


def failed_create(workload: str, events: list[dict[str, Any]], created: list[str]) -> Optional[str]:
    """The newest FailedCreate event of the workload or of a Job it owns (a JobSet's are named
    `<jobset>-<replicated job>`), unless a pod was created after it (the refusal is over)."""
    ours = [e for e in events if e["involvedObject"].get("kind") in POD_CREATING_KINDS
            and (e["involvedObject"].get("name") == workload or e["involvedObject"].get("name", "").startswith(workload + "-"))]  # fmt: skip
    if not ours:
        return None
    newest = max(ours, key=_event_time)
    if created and max(created) > _event_time(newest):
        return None
    return newest.get("message", "").strip() or newest.get("reason", "FailedCreate")


def _event_time(event: dict[str, Any]) -> str:
    return event.get("lastTimestamp") or event.get("eventTime") or event.get("metadata", {}).get("creationTimestamp", "")


def _lost_nodes_read(kubectl: Kubectl, pods: tuple[PodState, ...]) -> list[str]:
    """Only the nodes of live pods are read; nothing is said where nodes cannot be read (a user whose
    role reaches the namespace only)."""
    names = sorted({pod.node for pod in pods if pod.live and pod.node})
    if not names:
        return []
    done = kubectl.run("get", "nodes", *names, "--ignore-not-found", "-o", "json", check=False)
    if done.returncode != 0:
        return []
    found = json.loads(done.stdout) if done.stdout.strip() else {"items": []}
    return lost_nodes(pods, found.get("items", [found] if found.get("kind") == "Node" else []))


def lost_nodes(pods: tuple[PodState, ...], nodes: list[dict[str, Any]]) -> list[str]:
    """Each node under a live pod of the world that is not Ready, or whose Node object is gone, with
    those pods: `<node> NotReady since <time> (<the node controller's words>), pods <index> (<name>)`."""
    on_node: dict[str, list[PodState]] = {}
    for pod in pods:
        if pod.live and pod.node:
            on_node.setdefault(pod.node, []).append(pod)
    by_name = {node["metadata"]["name"]: node for node in nodes}
    said = []
    for name, held in sorted(on_node.items()):
        listed = ", ".join(f"{pod.index} ({pod.name})" for pod in held)
        node = by_name.get(name)
        if node is None:
            said.append(f"{name} is gone (its Node object was deleted), pods {listed}")
            continue
        ready = next((c for c in node.get("status", {}).get("conditions") or [] if c["type"] == "Ready"), None)
        if ready is not None and ready["status"] != "True":
            said.append(f"{name} NotReady since {ready.get('lastTransitionTime', '?')} ({_describe(ready)}), pods {listed}")
    return said


def _claims_not_binding(kubectl: Kubectl, pods: list[dict[str, Any]]) -> list[str]:
    """Only looked for while a pod of the world is not scheduled."""
    if not any(_unscheduled(pod) for pod in pods):
        return []
    events = _readable(kubectl, "events", "--field-selector", "involvedObject.kind=PersistentVolumeClaim")
    return claim_reasons(pods, _readable(kubectl, "persistentvolumeclaims"), events)


def _unscheduled(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in pod.get("status", {}).get("conditions") or [])


def claim_reasons(pods: list[dict[str, Any]], claims: list[dict[str, Any]], events: list[dict[str, Any]]) -> list[str]:
    """Why each claim an unscheduled pod mounts stays Pending, in the newest warning about it (a
    claim waiting for its first pod, as WaitForFirstConsumer classes do, is not a reason)."""
    wanted = sorted({volume["persistentVolumeClaim"]["claimName"] for pod in pods if _unscheduled(pod)
                     for volume in pod["spec"].get("volumes") or [] if "persistentVolumeClaim" in volume})  # fmt: skip
    by_name = {claim["metadata"]["name"]: claim for claim in claims}
    reasons = []
    for name in wanted:
        claim = by_name.get(name)
        if claim is None:
            reasons.append(f"claim {name} does not exist")
            continue
        if claim.get("status", {}).get("phase") != "Pending":
            continue
        warnings = sorted((e for e in events if e["involvedObject"].get("name") == name and e.get("type") == "Warning"), key=_event_time)
        if warnings:
            reasons.append(f"claim {name} Pending: {warnings[-1].get('reason', '')}: {warnings[-1].get('message', '')}")
    return reasons


def _readable(kubectl: Kubectl, kind: str, *selector: str) -> list[dict[str, Any]]:
    """The namespace's objects of a kind (`selector`: kubectl's flags that narrow them), none where
    the cluster lacks the kind (Kueue or Volcano not installed)."""
    done = kubectl.run("get", kind, *selector, "-o", "json", check=False)
    return json.loads(done.stdout)["items"] if done.returncode == 0 else []


def kueue_reason(workloads: list[dict[str, Any]], owner_uid: str) -> Optional[str]:
    """Kueue's word on the Workload it made for the owner: why it reserves no quota yet."""
    for workload in workloads:
        if not any(ref.get("uid") == owner_uid for ref in workload["metadata"].get("ownerReferences") or []):
            continue
        for condition in workload.get("status", {}).get("conditions") or []:
            if condition["type"] == "QuotaReserved" and condition["status"] == "False":
                return f"Kueue holds it ({_describe(condition)})"
    return None


def pod_group_reason(group: dict[str, Any]) -> Optional[str]:
    """Volcano's word on a PodGroup it has not scheduled: its phase and why."""
    status = group.get("status", {})
    if status.get("phase") in ("Running", "Completed"):
        return None
    found = [c for c in status.get("conditions") or [] if c.get("type") == "Unschedulable" and c.get("status") == "True"]
    if not found:
        return None
    return f"Volcano holds PodGroup {group['metadata']['name']} ({status.get('phase', 'Pending')}; {_describe(found[-1])})"
