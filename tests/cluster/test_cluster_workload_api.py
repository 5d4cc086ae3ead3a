"""`scheduling.gang.scheduler: kubernetes` on a cluster of Kubernetes 1.36 with the Workload API and
its gang scheduling on (the alpha gates: toolchain/apiserver/control_plane.py; a cluster of its own, since
they change how every Job there is scheduled), through the real engine, as a
Job and as a JobSet: the Job controller makes a PodGroup of the world's pods, and a world of 2 is
bound whole; a lost pod's replacement joins it; a world of 3 that the node has room for only 2 of
(another pod holds the rest of its CPU) is bound not at all, as it is with `scheduler: none` (the
control: this cluster's Job controller makes the PodGroup of any such Job; what `kubernetes` adds
is the preview's checks, not an object), no pod of it reaching the node, the
status view giving the scheduler's reason; once that pod goes, the whole world is bound. The Job
controller creates every pod at once, so only the scheduler holds them back.

The pods run the pause image in place of the trainer.
"""

from __future__ import annotations

import time

import pytest

from cluster_testing import (NAMESPACE, free_cpu_millis, get, kill_container, pause_pod_resources, place_placeholder,
                             placeholder_phase, pods, remove_placeholder, status_view, wait_for, world_pods, world_running)  # fmt: skip
from trainer import contract

pytestmark = pytest.mark.timeout(900)

POD_CPU_MILLIS = 400
GANG = {"scheduling__gang": {"scheduler": "kubernetes"}, **pause_pod_resources(f"{POD_CPU_MILLIS}m")}
NO_GANG = {"scheduling__gang": {"scheduler": "none"}, **pause_pod_resources(f"{POD_CPU_MILLIS}m")}
POD_GROUPS = "podgroups.scheduling.k8s.io"  # not Volcano's podgroups.scheduling.volcano.sh


def bound(cluster) -> list[str]:
    return [name for name, pod in pods(cluster, NAMESPACE).items() if pod["spec"].get("nodeName")]


def owning_jobs(cluster) -> set[str]:
    """The uids of the Jobs that own the world's pods."""
    return {pod["metadata"]["ownerReferences"][0]["uid"] for pod in world_pods(cluster).values()}


def pod_group(cluster) -> dict:
    """The PodGroup the world's pods name (the Job controller makes it, with a name of its own)."""
    (name,) = {pod["spec"]["schedulingGroup"]["podGroupName"] for pod in world_pods(cluster).values()}
    return get(cluster, POD_GROUPS, name, NAMESPACE)


def scheduled_condition(cluster) -> dict | None:
    conditions = pod_group(cluster).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodGroupScheduled"), None)


@pytest.fixture
def placeholder(workload_api_cluster):
    yield lambda cpu_millis: place_placeholder(workload_api_cluster, cpu_millis)
    remove_placeholder(workload_api_cluster)


@pytest.mark.parametrize("kind", [contract.INDEXED_JOB, contract.JOBSET])
def test_the_kubernetes_scheduler_binds_a_world_whole_or_not_at_all(workload_api_cluster, workload_api_pause_stack, placeholder, kind):
    cluster = workload_api_cluster

    # A world of 2 with room for it: bound whole, its pods in the PodGroup the Job controller made.
    started = time.monotonic()
    workload_api_pause_stack.up(nodes=2, workload__kind=kind, **GANG)
    wait_for(lambda: world_running(cluster, 2), 300, "both pods Running", interval=1)
    bound_after = time.monotonic() - started
    group = pod_group(cluster)
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert [ref["kind"] for ref in group["metadata"]["ownerReferences"] if ref.get("controller")] == ["Job"]
    scheduled = wait_for(lambda: scheduled_condition(cluster), 60, "the PodGroup's PodGroupScheduled condition")
    assert scheduled["status"] == "True", scheduled

    # A lost pod (its container SIGKILLed): the world runs again, the replacement bound with the rest.
    lost = world_pods(cluster)[1]
    kill_container(cluster, lost["metadata"]["name"])
    wait_for(lambda: world_running(cluster, 2) and world_pods(cluster)[1]["metadata"]["uid"] != lost["metadata"]["uid"], 180,
             "the lost pod's replacement Running", interval=1)  # fmt: skip

    # Room for 2 of a world of 3 pods: another pod holds the rest of the node's CPU (counted with
    # the world of 2 still running, which the new world replaces).
    room_once_replaced = free_cpu_millis(cluster) + 2 * POD_CPU_MILLIS
    placeholder(room_once_replaced - (2 * POD_CPU_MILLIS + POD_CPU_MILLIS // 2))
    wait_for(lambda: placeholder_phase(cluster) == "Running", 120, "the placeholder holding the CPU Running")
    # The control: the same world of 3 with `scheduler: none`. This cluster's Job controller makes
    # the PodGroup of such a Job all the same, so it is held back whole too: on a cluster with the
    # Workload API the gang is the cluster's. What `kubernetes` adds is at preview (the cluster
    # must serve the API; a StatefulSet, an elastic world and spare pods are refused), not in the
    # objects: the `up` that sets it after leaves the Job as it was.
    workload_api_pause_stack.up(nodes=3, workload__kind=kind, **NO_GANG, workload__waitFor="none")
    wait_for(lambda: len(world_pods(cluster)) == 3 and all("schedulingGroup" in pod["spec"] for pod in world_pods(cluster).values()),
             120, "the control world's 3 pods, each in the Job controller's PodGroup", interval=1)  # fmt: skip
    control_job = owning_jobs(cluster)
    time.sleep(10)  # the scheduler has had tries
    assert bound(cluster) == [], "the control world is held back whole as well"
    workload_api_pause_stack.up(nodes=3, workload__kind=kind, **GANG, workload__waitFor="none")
    assert owning_jobs(cluster) == control_job, "the same Job: the stack wrote the same objects"
    wait_for(lambda: len(world_pods(cluster)) == 3, 120, "the Job's controller to create 3 pods", interval=1)
    why = wait_for(lambda: (c := scheduled_condition(cluster)) and c["status"] == "False" and c, 120,
                   "the scheduler to try the world of 3 and record why it waits", interval=1)  # fmt: skip
    assert why["reason"] == "Unschedulable", why
    time.sleep(10)  # the scheduler has had more tries: still no pod bound
    assert bound(cluster) == [], "no pod of a world the scheduler holds back may reach the node"
    status = status_view(cluster, workload_api_pause_stack.outputs["statusCommand"])
    name = pod_group(cluster)["metadata"]["name"]
    assert f"waiting: the Kubernetes scheduler holds PodGroup {name} (Unschedulable: " in status, status
    assert "Insufficient cpu" in status, "the pod that does not fit says why"

    # The CPU is given back: the whole world of 3 is bound.
    started = time.monotonic()
    remove_placeholder(cluster)
    wait_for(lambda: world_running(cluster, 3), 300, "all 3 pods Running", interval=1)
    assert len(bound(cluster)) == 3
    print(f"\n[figures] Kubernetes gang ({kind}): world of 2 bound and Running {bound_after:.1f} s after up; world of 3 held back "
          f"(PodGroupScheduled {why['reason']}: {why['message']}), then Running {time.monotonic() - started:.1f} s after the CPU was freed")  # fmt: skip
