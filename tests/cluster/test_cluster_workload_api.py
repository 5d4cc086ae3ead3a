"""`scheduling.gang.scheduler: kubernetes` on a cluster of Kubernetes 1.37 with the Workload API
(scheduling.k8s.io/v1beta1) and its gang scheduling on (the gates: toolchain/apiserver/control_plane.py;
a cluster of its own, since they change how Jobs there are scheduled), through the real engine, as
a Job and as a JobSet: the stack writes the Workload of the world's gang, the Job controller makes
its PodGroup and puts the world's pods in it, and a world of 2 is bound whole; a lost pod's
replacement joins it; a world of 3 that the node has room for only 2 of (other pods hold the rest
of its CPU) is bound not at all, while with `scheduler: none` (the control) 2 of its pods are
bound one by one, no pod of the gang reaching the node, the status view giving the scheduler's
reason; once the room is there, the whole world is bound. An elastic world (2:3) is bound at its
minimum, together, or not at all, and grows to 3 once there is room for a third pod. The Job
controller creates every pod at once, so only the scheduler holds them back.

The pods run the pause image in place of the trainer.
"""

from __future__ import annotations

import time

import pytest

from cluster_testing import (NAMESPACE, free_cpu_millis, get, kill_container, pause_pod_resources, place_placeholder,
                             placeholder_phase, pods, remove_placeholder, status_view, wait_for, world_pods, world_running)  # fmt: skip
from observe.world_state import POD_GROUP_SCHEDULED
from trainer import contract

pytestmark = pytest.mark.timeout(900)

POD_CPU_MILLIS = 400
GANG = {"scheduling__gang": {"scheduler": "kubernetes"}, **pause_pod_resources(f"{POD_CPU_MILLIS}m")}
NO_GANG = {"scheduling__gang": {"scheduler": "none"}, **pause_pod_resources(f"{POD_CPU_MILLIS}m")}
POD_GROUPS = "podgroups.scheduling.k8s.io"  # not Volcano's podgroups.scheduling.volcano.sh
WORKLOADS = "workloads.scheduling.k8s.io"  # not Kueue's workloads.kueue.x-k8s.io


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
    return next((c for c in conditions if c["type"] in POD_GROUP_SCHEDULED), None)


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
    workload = get(cluster, WORKLOADS, workload_api_pause_stack.outputs["workloadName"], NAMESPACE)
    assert workload["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    scheduled = wait_for(lambda: scheduled_condition(cluster), 60, "the PodGroup's PodGroupInitiallyScheduled condition")
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
    # The control: the same world of 3 with `scheduler: none`, its pods bound one by one: 2 of them.
    workload_api_pause_stack.up(nodes=3, workload__kind=kind, **NO_GANG, workload__waitFor="none")
    wait_for(lambda: len(bound(cluster)) == 2 and len(world_pods(cluster)) == 3, 120, "2 of the control world's 3 pods bound", interval=1)
    assert not any("schedulingGroup" in pod["spec"] for pod in world_pods(cluster).values()), "no gang without the Workload"
    control_job = owning_jobs(cluster)
    workload_api_pause_stack.up(nodes=3, workload__kind=kind, **GANG, workload__waitFor="none")
    assert owning_jobs(cluster) != control_job, "a Job of a gang is a new Job: the Job controller gangs only a Job that never started"
    wait_for(lambda: len(world_pods(cluster)) == 3 and all("schedulingGroup" in pod["spec"] for pod in world_pods(cluster).values()),
             120, "the Job controller to create 3 pods, each in its PodGroup", interval=1)  # fmt: skip
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
          f"(PodGroupInitiallyScheduled {why['reason']}: {why['message']}), then Running {time.monotonic() - started:.1f} s after the CPU was freed")  # fmt: skip


@pytest.fixture
def placeholders(workload_api_cluster):
    names = []

    def place(name: str, cpu_millis: int) -> None:
        names.append(name)
        place_placeholder(workload_api_cluster, cpu_millis, name)
        wait_for(lambda: placeholder_phase(workload_api_cluster, name) == "Running", 120, f"placeholder {name} Running")

    yield place
    for name in names:
        remove_placeholder(workload_api_cluster, name)


@pytest.mark.parametrize("kind", [contract.INDEXED_JOB, contract.JOBSET])
def test_an_elastic_world_is_bound_at_its_minimum_together_or_not_at_all_and_grows_as_room_appears(
        workload_api_cluster, workload_api_pause_stack, placeholders, kind):
    """nodes 2:3: the gang is the world's minimum. Room for 1 pod: none bound; room for 2: 2 bound
    together; room for 3: the third too."""
    cluster = workload_api_cluster
    room_once_replaced = free_cpu_millis(cluster) + len(bound(cluster)) * POD_CPU_MILLIS
    placeholders("held-for-good", room_once_replaced - (3 * POD_CPU_MILLIS + POD_CPU_MILLIS // 2))
    placeholders("room-for-a-second", POD_CPU_MILLIS)
    placeholders("room-for-a-third", POD_CPU_MILLIS)
    workload_api_pause_stack.up(nodes="2:3", workload__kind=kind, **GANG, workload__waitFor="none")
    wait_for(lambda: len(world_pods(cluster)) == 3 and all("schedulingGroup" in pod["spec"] for pod in world_pods(cluster).values()),
             120, "the world's 3 pods, each in the gang's PodGroup", interval=1)  # fmt: skip
    assert pod_group(cluster)["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    why = wait_for(lambda: (c := scheduled_condition(cluster)) and c["status"] == "False" and c, 120,
                   "the scheduler to try the world and record why it waits", interval=1)  # fmt: skip
    time.sleep(10)  # the scheduler has had more tries
    assert bound(cluster) == [], f"room for 1 pod of a gang of 2: none may reach the node ({why['message']})"

    remove_placeholder(cluster, "room-for-a-second")
    started = time.monotonic()
    wait_for(lambda: len(bound(cluster)) >= 2, 120, "the gang of 2 bound", interval=0.5)
    together = time.monotonic() - started
    time.sleep(10)  # the scheduler has had tries at the third pod
    assert len(bound(cluster)) == 2, "room for 2: the third pod waits"

    remove_placeholder(cluster, "room-for-a-third")
    wait_for(lambda: len(bound(cluster)) == 3, 120, "the world grown to 3", interval=1)
    print(f"\n[figures] Kubernetes gang, elastic 2:3 ({kind}): none bound with room for 1; 2 bound {together:.1f} s after room "
          "for 2 appeared; the third once room for it appeared")  # fmt: skip
