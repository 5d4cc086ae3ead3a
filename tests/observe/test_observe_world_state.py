"""Why a world waits, in its queue's own words: Kueue's Workload, Volcano's PodGroup and the Kubernetes
scheduler's PodGroup as the API server returns them (observe/world_state.py). On the local cluster:
tests/cluster/test_cluster_kueue.py, test_cluster_volcano.py and test_cluster_workload_api.py read
them through the status view."""

from __future__ import annotations

from ddp_infra import gang
from observe import world_state

HELD = {"type": "QuotaReserved", "status": "False", "reason": "Pending",
        "message": "couldn't assign flavors to pod set main: insufficient quota for pods in flavor default-flavor, request > maximum capacity (4 > 3)"}  # fmt: skip


def kueue_workload(owner_uid: str, *conditions: dict) -> dict:
    return {"metadata": {"name": f"job-trainer-{owner_uid}", "ownerReferences": [{"uid": owner_uid}]}, "status": {"conditions": list(conditions)}}


def test_kueues_reason_is_read_from_the_workload_that_the_world_owns():
    workloads = [kueue_workload("other", {**HELD, "message": "another world's reason"}), kueue_workload("mine", HELD)]
    assert world_state.kueue_reason(workloads, "mine") == f"Kueue holds it (Pending: {HELD['message']})"
    admitted = {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved in ClusterQueue worlds"}
    assert world_state.kueue_reason([kueue_workload("mine", admitted)], "mine") is None
    assert world_state.kueue_reason([], "mine") is None  # Kueue has not made it yet, or is not installed


def test_volcanos_reason_is_its_pod_groups_last_unschedulable_condition():
    group = {"metadata": {"name": "trainer"}, "status": {"phase": "Pending", "conditions": [
        {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": "4/4 tasks in gang unschedulable: pod group is not ready, 4 Pending"},
    ]}}  # fmt: skip
    assert world_state.pod_group_reason(group) == (
        "Volcano holds PodGroup trainer (Pending; NotEnoughResources: 4/4 tasks in gang unschedulable: pod group is not ready, 4 Pending)")
    assert world_state.pod_group_reason({**group, "status": {**group["status"], "phase": "Running"}}) is None
    assert world_state.pod_group_reason({"metadata": {"name": "trainer"}, "status": {"phase": "Inqueue"}}) is None
    # the pods name their group by the annotation the program writes
    assert world_state.VOLCANO_GROUP_ANNOTATION == gang.VOLCANO_GROUP_ANNOTATION


def test_the_kubernetes_schedulers_reason_is_its_pod_groups_false_scheduled_condition():
    # as the 1.36 scheduler writes it on a PodGroup of 3 with room for 2 (seen on the local cluster)
    held = {"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable", "message": "pod group is unschedulable"}
    group = {"metadata": {"name": "trainer-5c9d-trainer-pgt-0-7b4f"}, "status": {"conditions": [held]}}
    assert world_state.kubernetes_pod_group_reason(group) == (
        "the Kubernetes scheduler holds PodGroup trainer-5c9d-trainer-pgt-0-7b4f (Unschedulable: pod group is unschedulable)")
    scheduled = {**held, "status": "True", "reason": "Scheduled", "message": ""}
    assert world_state.kubernetes_pod_group_reason({**group, "status": {"conditions": [scheduled]}}) is None
    assert world_state.kubernetes_pod_group_reason({"metadata": group["metadata"]}) is None  # not tried yet
    # as the 1.37 scheduler writes it (v1beta1) on a gang of 2 with room for 1 (seen on the local cluster)
    message = "minCount (2) cannot be satisfied: 1 scheduled, 0 remaining, pod group preemption: No preemption victims found for incoming preemptor"
    held = {"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    group = {"metadata": {"name": "trainer-world-5bfd968b"}, "status": {"conditions": [held]}}
    assert world_state.kubernetes_pod_group_reason(group) == f"the Kubernetes scheduler holds PodGroup trainer-world-5bfd968b (Unschedulable: {message})"


def pod(name: str, scheduled: bool, *claims: str) -> dict:
    condition = {"type": "PodScheduled", "status": "True" if scheduled else "False"}
    return {"metadata": {"name": name}, "spec": {"volumes": [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims]},
            "status": {"conditions": [condition]}}  # fmt: skip


def claim(name: str, phase: str) -> dict:
    return {"metadata": {"name": name}, "status": {"phase": phase}}


def claim_event(name: str, kind: str, reason: str, message: str, at: str) -> dict:
    return {"involvedObject": {"kind": "PersistentVolumeClaim", "name": name}, "type": kind, "reason": reason, "message": message, "lastTimestamp": at}


def test_a_claim_that_does_not_bind_is_named_with_its_newest_warning():
    pods = [pod("trainer-0", False, "outputs-pvc", "datasets-pvc"), pod("trainer-1", True, "models-pvc")]
    claims = [claim("outputs-pvc", "Pending"), claim("datasets-pvc", "Pending"), claim("models-pvc", "Pending")]
    events = [
        claim_event("outputs-pvc", "Warning", "ProvisioningFailed", 'storageclass.storage.k8s.io "fast" not found', "2026-11-26T01:00:05Z"),
        claim_event("outputs-pvc", "Warning", "ProvisioningFailed", "an older try", "2026-11-26T01:00:01Z"),
        # a WaitForFirstConsumer claim waits for its pod: no reason of its own
        claim_event("datasets-pvc", "Normal", "WaitForFirstConsumer", "waiting for first consumer to be created before binding", "2026-11-26T01:00:02Z"),
        claim_event("models-pvc", "Warning", "ProvisioningFailed", "the scheduled pod's claim", "2026-11-26T01:00:03Z"),
    ]
    assert world_state.claim_reasons(pods, claims, events) == [
        'claim outputs-pvc Pending: ProvisioningFailed: storageclass.storage.k8s.io "fast" not found',
    ]
    assert world_state.claim_reasons([pod("trainer-0", False, "gone-pvc")], claims, events) == ["claim gone-pvc does not exist"]
    assert world_state.claim_reasons([pod("trainer-0", False, "outputs-pvc")], [claim("outputs-pvc", "Bound")], events) == []


def _pod(index: int, node: str, phase: str = "Running") -> world_state.PodState:
    return world_state.PodState(name=f"trainer-{index}-x", uid=str(index), index=index, phase=phase, restarts=0, waiting=None,
                                last_exit=None, deleting=False, created="2026-11-27T00:00:00Z", node=node)  # fmt: skip


def _node(name: str, ready: str, **condition: str) -> dict:
    return {"metadata": {"name": name}, "status": {"conditions": [{"type": "Ready", "status": ready, **condition}]}}


def test_a_node_lost_under_a_live_pod_is_named_with_the_node_controllers_words_and_its_pods():
    pods = (_pod(0, "n0"), _pod(1, "n1"), _pod(2, "n1"), _pod(3, "n2", phase="Failed"))
    lost = {"lastTransitionTime": "2026-11-27T00:01:02Z", "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status."}
    nodes = [_node("n0", "True"), _node("n1", "Unknown", **lost), _node("n2", "Unknown", **lost)]
    assert world_state.lost_nodes(pods, nodes) == [
        "n1 NotReady since 2026-11-27T00:01:02Z (NodeStatusUnknown: Kubelet stopped posting node status.), pods 1 (trainer-1-x), 2 (trainer-2-x)"
    ]  # n2 holds no live pod of the world: not the world's concern
    # a Node object deleted under a pod that is still bound to it
    assert world_state.lost_nodes(pods, [_node("n0", "True")]) == ["n1 is gone (its Node object was deleted), pods 1 (trainer-1-x), 2 (trainer-2-x)"]
    assert world_state.lost_nodes(pods, [_node("n0", "True"), _node("n1", "True")]) == []


QUOTA = 'pods "trainer-1-x7k2p" is forbidden: exceeded quota: one-pod, requested: pods=1, used: pods=1, limited: pods=1'


def failed_create(kind: str, name: str, message: str, at: str) -> dict:
    return {"involvedObject": {"kind": kind, "name": name}, "reason": "FailedCreate", "type": "Warning", "message": message, "lastTimestamp": at}


def test_a_pod_the_controller_cannot_create_is_said_in_its_newest_event_until_a_pod_is_created_after_it():
    events = [failed_create("Job", "trainer", "an older refusal", "2026-11-28T10:00:00Z"), failed_create("Job", "trainer", QUOTA, "2026-11-28T10:00:30Z"),
              failed_create("Job", "other", "another workload's", "2026-11-28T10:01:00Z"),
              failed_create("ReplicaSet", "trainer-rdzv-store-5d8f", "the store's, not a pod of the world", "2026-11-28T10:01:00Z")]  # fmt: skip
    assert world_state.failed_create("trainer", events, ["2026-11-28T10:00:00Z"]) == QUOTA
    assert world_state.failed_create("trainer", events, ["2026-11-28T10:00:31Z"]) is None  # the refusal is over
    # a JobSet's pods are created by its Job, named after it
    jobset = [failed_create("Job", "trainer-workers", QUOTA, "2026-11-28T10:00:30Z")]
    assert world_state.failed_create("trainer", jobset, []) == QUOTA
    assert world_state.failed_create("trainer", [], []) is None


def test_the_pods_a_workload_wants_are_counted_as_its_controller_counts_them():
    assert world_state.wanted_pods("job", {"spec": {"parallelism": 3}}) == 3
    assert world_state.wanted_pods("statefulset", {"spec": {"replicas": 4}}) == 4
    jobset = {"spec": {"replicatedJobs": [{"replicas": 1, "template": {"spec": {"parallelism": 5}}}]}}
    assert world_state.wanted_pods("jobset", jobset) == 5
    refused = world_state.WorldState(pods=(), ended=None, held=None, cannot_create=QUOTA)
    assert refused.waits() == [f"cannot create pods: {QUOTA}"]
