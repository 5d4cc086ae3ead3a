"""Kueue as a cluster's admin sets it up (a ResourceFlavor, a ClusterQueue, a namespace's LocalQueue,
a Topology), and what Kueue says of a stack's world (its Workload: admitted, held back and why,
where its topology placed the pods). For the journeys on the controllers' cluster and on the
cluster of three nodes in two racks."""

from __future__ import annotations

import json

from cluster_testing import NAMESPACE, WORKLOAD, apply, get, pause_pod_resources, wait_for
from trainer import contract

FLAVOR = "default-flavor"
CLUSTER_QUEUE = "worlds"
TOPOLOGY = "datacenter"
TAS_FLAVOR = "tas-flavor"
HOSTNAME = "kubernetes.io/hostname"
SMALL_PODS = pause_pod_resources("10m")
RESOURCE = {contract.INDEXED_JOB: "job", contract.JOBSET: "jobset"}


def cluster_queue(pods_quota: int, flavor: str = FLAVOR) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": CLUSTER_QUEUE},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{
                "coveredResources": ["cpu", "memory", "pods"],
                "flavors": [{"name": flavor, "resources": [
                    {"name": "cpu", "nominalQuota": "100"},
                    {"name": "memory", "nominalQuota": "100Gi"},
                    {"name": "pods", "nominalQuota": pods_quota},
                ]}],
            }],
        },
    }  # fmt: skip


def set_quota(cluster, pods_quota: int) -> None:
    apply(cluster, [{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
                    cluster_queue(pods_quota)])  # fmt: skip


def set_topology(cluster, levels: list[str], node_labels: dict[str, str], pods_quota: int) -> None:
    """A Kueue Topology of `levels` (node labels, the widest first), a ResourceFlavor of the nodes
    with `node_labels` that names it, and a ClusterQueue whose only flavor it is."""
    apply(cluster, [
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Topology", "metadata": {"name": TOPOLOGY},
         "spec": {"levels": [{"nodeLabel": level} for level in levels]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": TAS_FLAVOR},
         "spec": {"nodeLabels": node_labels, "topologyName": TOPOLOGY}},
        cluster_queue(pods_quota, TAS_FLAVOR),
    ])  # fmt: skip


def remove_queues(cluster) -> None:
    """The ClusterQueue, then every flavor and the Topology (Kueue keeps each while something uses it)."""
    for kind, name in (("clusterqueue", CLUSTER_QUEUE), ("resourceflavor", FLAVOR), ("resourceflavor", TAS_FLAVOR),
                       ("topologies.kueue.x-k8s.io", TOPOLOGY)):  # fmt: skip
        cluster.kubectl("delete", kind, name, "--ignore-not-found", "--wait=true", "--timeout=120s")


def queued_namespace(cluster, queue: str) -> dict:
    """The stack's namespace with its LocalQueue, made before the stack, as a platform team makes them;
    the stack then uses the namespace (namespace.create false).

    Kueue 0.12.3 has to know the queue before the workload: a Workload it reconciles between the
    LocalQueue's creation and its queue manager's taking it in is marked inadmissible ("ClusterQueue
    doesn't exist", with no name) and stays so (seen here when the queue came right after the Job)."""
    apply(cluster, [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
         "metadata": {"name": queue, "namespace": NAMESPACE}, "spec": {"clusterQueue": CLUSTER_QUEUE}},
    ])  # fmt: skip
    # Kueue marks the queue Active once its queue manager holds it.
    wait_for(lambda: condition(get(cluster, "localqueue", queue, NAMESPACE), "Active").get("status") == "True", 60,
             f"LocalQueue {queue} active")  # fmt: skip
    return {"namespace__create": False, "scheduling__gang": {"scheduler": "kueue", "queue": queue}}


def kueue_workload(cluster, kind: str) -> dict | None:
    """Kueue's Workload of the stack's Job or JobSet (owned by it), or None before Kueue made it."""
    owner = get(cluster, RESOURCE[kind], WORKLOAD, NAMESPACE)
    found = json.loads(cluster.kubectl("get", "workloads.kueue.x-k8s.io", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    owned = [w for w in found if any(ref["uid"] == owner["metadata"]["uid"] for ref in w["metadata"].get("ownerReferences", []))]
    return owned[0] if owned else None


def condition(obj: dict | None, kind: str) -> dict:
    conditions = (obj or {}).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == kind), {})


def admitted(cluster, kind: str, what: str) -> dict:
    """The stack's Workload once Kueue has admitted it."""
    return wait_for(lambda: (w := kueue_workload(cluster, kind)) and condition(w, "Admitted").get("status") == "True" and w,
                    120, f"Kueue to admit {what}", interval=1)  # fmt: skip


def admitted_pods(workload: dict) -> int:
    """The pods Kueue reserved quota for, over the workload's pod sets."""
    return sum(assignment["count"] for assignment in workload["status"]["admission"]["podSetAssignments"])


def held_back(cluster, kind: str) -> dict:
    """The Workload once Kueue has tried it and reserved nothing: why, in its QuotaReserved condition."""
    try:
        return wait_for(
            lambda: (w := kueue_workload(cluster, kind)) and condition(w, "QuotaReserved").get("status") == "False"
            and condition(w, "QuotaReserved").get("reason") == "Pending" and w,
            120, f"Kueue to try the {kind}'s world and hold it back", interval=1,
        )  # fmt: skip
    except AssertionError as waited:
        raise AssertionError(f"{waited}; the Workload's status: {(kueue_workload(cluster, kind) or {}).get('status')}") from None


def pods_by_domain(assignment: dict) -> dict[str, int]:
    """Pods per domain of the lowest level, from a Workload's topologyAssignment in Kueue's v1beta2
    form (slices of domains, each level's values and the pod counts, each given once for all
    domains or one per domain)."""
    placed: dict[str, int] = {}
    for piece in assignment["slices"]:
        count, lowest, pods_of = piece["domainCount"], piece["valuesPerLevel"][-1], piece["podCounts"]
        names = [lowest["universal"]] * count if "universal" in lowest else [
            f"{lowest['individual'].get('prefix', '')}{root}{lowest['individual'].get('suffix', '')}" for root in lowest["individual"]["roots"]]
        counts = [pods_of["universal"]] * count if "universal" in pods_of else pods_of["individual"]
        for name, pods_here in zip(names, counts):
            placed[name] = placed.get(name, 0) + pods_here
    return placed


def placement(workload: dict) -> dict[str, int]:
    """Where Kueue's topology placed the world's one pod set: pods per host."""
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    placed = assignment["topologyAssignment"]
    assert placed["levels"] == [HOSTNAME], placed
    return pods_by_domain(placed)


def suspended(cluster, kind: str) -> bool:
    return get(cluster, RESOURCE[kind], WORKLOAD, NAMESPACE)["spec"].get("suspend") is True


def waits_for(cluster, kind: str) -> str:
    """What `pulumi up` waits for on the workload (its waitFor jsonpath) as it stands in the cluster now."""
    workload = get(cluster, RESOURCE[kind], WORKLOAD, NAMESPACE)
    path = workload["metadata"]["annotations"]["pulumi.com/waitFor"].removeprefix("jsonpath=")
    return cluster.kubectl("get", RESOURCE[kind], WORKLOAD, "-n", NAMESPACE, "-o", f"jsonpath={path}").stdout
