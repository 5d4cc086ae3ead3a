"""`scheduling.gang.scheduler: kubernetes` on a cluster of Kubernetes 1.37 with the Workload API
(`scheduling.k8s.io/v1beta1`) and its gang scheduling on (the gates: toolchain/apiserver/control_plane.py;
a cluster of its own), through the real engine, as a Job and as a JobSet.

The stack writes a Workload of one PodGroup template and hands it to the Job controller, which
makes the PodGroup of the world's pods: a world of 2 is bound whole; a lost pod's replacement joins
it; a resize to 3 on a node with room for 2 (another pod holds the rest of its CPU) changes the
Workload's minCount in place and replaces the Job, and no pod of the new world reaches the node, the status view giving the
scheduler's reason, until the CPU is given back and the world is bound whole. The control: the same
world of 3 with `scheduler: none` gets 2 of its 3 pods bound, half a world holding the node. An
elastic world of 2:3 is bound at 2 together or not at all and grows to 3 once there is room. The
Job controller creates every pod at once, so only the scheduler holds them back.

The pods run the pause image in place of the trainer, but in the elastic JobSet's journey
(elastic_journey.py), which trains: admitted whole at its minimum, growing, shrinking at a lost pod
and growing back, every sample of each epoch trained once.
"""

from __future__ import annotations

import json
import time

import pytest

from cluster_testing import (NAMESPACE, PLACEHOLDER, bound, free_cpu_millis, get, hold_cpu, kill_container, pause_pod_resources,
                             remove_placeholder, status_view, wait_for, world_pods, world_running)  # fmt: skip
from elastic_journey import journey
from ddp_infra import gang
from ddp_infra.names import WORKLOAD_API_BETA
from trainer import contract

pytestmark = pytest.mark.timeout(900)

POD_CPU_MILLIS = 400
GANG = {"scheduling__gang": {"scheduler": "kubernetes"}, **pause_pod_resources(f"{POD_CPU_MILLIS}m")}
NO_GANG = {"scheduling__gang": {"scheduler": "none"}, **pause_pod_resources(f"{POD_CPU_MILLIS}m")}
POD_GROUPS = "podgroups.scheduling.k8s.io"  # not Volcano's podgroups.scheduling.volcano.sh
WORKLOADS = "workloads.scheduling.k8s.io"
HOLDS = ("hold-a", "hold-b")  # placeholders that give the CPU back one pod's worth at a time


def pod_group(cluster) -> dict:
    """The PodGroup the world's pods name (the Job controller makes it, with a name of its own)."""
    (name,) = {pod["spec"]["schedulingGroup"]["podGroupName"] for pod in world_pods(cluster).values()}
    return get(cluster, POD_GROUPS, name, NAMESPACE)


def scheduled_condition(cluster) -> dict | None:
    conditions = pod_group(cluster).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodGroupInitiallyScheduled"), None)


def held_back(cluster, pods_expected: int) -> dict:
    """Waits for the world's pods and the scheduler's record that it holds their PodGroup back;
    returns that condition once the scheduler has had more tries and still bound none."""
    wait_for(lambda: len(world_pods(cluster)) == pods_expected and all("schedulingGroup" in p["spec"] for p in world_pods(cluster).values()),
             120, f"the Job controller to create {pods_expected} pods in its PodGroup", interval=1)  # fmt: skip
    why = wait_for(lambda: (c := scheduled_condition(cluster)) and c["status"] == "False" and c, 120,
                   "the scheduler to try the world and record why it waits", interval=1)  # fmt: skip
    assert why["reason"] == "Unschedulable", why
    time.sleep(10)  # the scheduler has had more tries
    assert bound(cluster) == [], "no pod of a world the scheduler holds back may reach the node"
    return why


def the_workload(cluster) -> dict:
    (workload,) = workloads(cluster)
    assert workload["apiVersion"] == WORKLOAD_API_BETA
    return workload


def workloads(cluster) -> list[dict]:
    return json.loads(cluster.kubectl("get", WORKLOADS, "-n", NAMESPACE, "-o", "json").stdout)["items"]


@pytest.fixture
def placeholders(workload_api_cluster):
    """The placeholder pods a test places (hold) are removed after it."""
    yield
    for name in (PLACEHOLDER, *HOLDS):
        remove_placeholder(workload_api_cluster, name)


def hold(cluster, room_millis: int, replacing: int = 0, one_pod_each: tuple[str, ...] = ()) -> None:
    """Holds the node's CPU but `room_millis` once the `replacing` pods of the world running now
    are gone, and one more pod's worth per name of `one_pod_each` (each given back on its own later)."""
    free = free_cpu_millis(cluster) + replacing * POD_CPU_MILLIS
    hold_cpu(cluster, {PLACEHOLDER: free - room_millis - POD_CPU_MILLIS * len(one_pod_each), **dict.fromkeys(one_pod_each, POD_CPU_MILLIS)})


@pytest.mark.parametrize("kind", [contract.INDEXED_JOB, contract.JOBSET])
def test_the_kubernetes_scheduler_binds_a_world_whole_or_not_at_all(workload_api_cluster, workload_api_pause_stack, placeholders, kind):
    cluster = workload_api_cluster

    # A world of 2 with room for it: bound whole, its pods in the PodGroup of the stack's Workload.
    started = time.monotonic()
    workload_api_pause_stack.up(nodes=2, workload__kind=kind, **GANG)
    wait_for(lambda: world_running(cluster, 2), 300, "both pods Running", interval=1)
    bound_after = time.monotonic() - started
    workload = the_workload(cluster)
    group = pod_group(cluster)
    assert group["spec"]["workloadRef"] == {"workloadName": workload["metadata"]["name"], "templateName": gang.GROUP_TEMPLATE_NAME}
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert [ref["kind"] for ref in group["metadata"]["ownerReferences"] if ref.get("controller")] == ["Job"]
    scheduled = wait_for(lambda: scheduled_condition(cluster), 60, "the PodGroup's PodGroupInitiallyScheduled condition")
    assert scheduled["status"] == "True", scheduled

    # A lost pod (its container SIGKILLed): the world runs again, the replacement bound with the rest.
    lost = world_pods(cluster)[1]
    kill_container(cluster, lost["metadata"]["name"])
    wait_for(lambda: world_running(cluster, 2) and world_pods(cluster)[1]["metadata"]["uid"] != lost["metadata"]["uid"], 180,
             "the lost pod's replacement Running", interval=1)  # fmt: skip

    # Room for 2 of a world of 3 pods (counted with the world of 2 still running, which the new
    # world replaces). The resize changes the Workload's minCount in place and replaces the Job.
    hold(cluster, room_millis=2 * POD_CPU_MILLIS + POD_CPU_MILLIS // 2, replacing=2)
    workload_api_pause_stack.up(nodes=3, workload__kind=kind, **GANG, workload__waitFor="none")
    resized = the_workload(cluster)
    assert resized["metadata"]["uid"] == workload["metadata"]["uid"]
    assert resized["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    why = held_back(cluster, 3)
    status = status_view(cluster, workload_api_pause_stack.outputs["statusCommand"])
    name = pod_group(cluster)["metadata"]["name"]
    assert f"waiting: the Kubernetes scheduler holds PodGroup {name} (Unschedulable: " in status, status
    assert "Insufficient cpu" in status, "the pod that does not fit says why"

    # The control: the same world of 3 with `scheduler: none`. The stack's Workload is gone; a
    # root Job's pods are scheduled one by one (1.37's Job controller makes it a Workload of its
    # own, of a basic policy), and 2 of them are bound: half a world holding the node.
    workload_api_pause_stack.up(nodes=3, workload__kind=kind, **NO_GANG, workload__waitFor="none")
    policies = [template["schedulingPolicy"] for w in workloads(cluster) for template in w["spec"]["podGroupTemplates"]]
    assert all("gang" not in policy for policy in policies), policies
    wait_for(lambda: len(world_pods(cluster)) == 3 and len(bound(cluster)) == 2, 120, "2 of the control world's 3 pods bound", interval=1)
    time.sleep(10)
    assert len(bound(cluster)) == 2, "the third never fits"

    # The gang again: the half world is replaced by one the scheduler holds back whole; once the
    # CPU is given back, the whole world of 3 is bound.
    workload_api_pause_stack.up(nodes=3, workload__kind=kind, **GANG, workload__waitFor="none")
    held_back(cluster, 3)
    started = time.monotonic()
    remove_placeholder(cluster)
    wait_for(lambda: world_running(cluster, 3), 300, "all 3 pods Running", interval=1)
    assert len(bound(cluster)) == 3
    whole_after = time.monotonic() - started
    print(f"\n[figures] Kubernetes gang, {WORKLOAD_API_BETA} ({kind}): world of 2 bound and Running {bound_after:.1f} s after up; "
          f"resized to 3 with room for 2: held back ({scheduled_condition_text(why)}), then Running {whole_after:.1f} s "
          f"after the CPU was freed; without the gang 2 of 3 bound")  # fmt: skip


def scheduled_condition_text(condition: dict) -> str:
    return f"PodGroupInitiallyScheduled {condition['reason']}: {condition['message']}"


def test_an_elastic_world_is_bound_at_its_minimum_together_or_not_at_all_and_grows_as_room_appears(
        workload_api_cluster, workload_api_pause_stack, placeholders):  # fmt: skip
    cluster = workload_api_cluster
    # Room for 1 pod of a world of 2:3, and two more pods' worth held one each.
    hold(cluster, room_millis=POD_CPU_MILLIS + POD_CPU_MILLIS // 2, one_pod_each=HOLDS)
    workload_api_pause_stack.up(nodes="2:3", **GANG, workload__waitFor="none")
    assert the_workload(cluster)["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    why = held_back(cluster, 3)

    # Room for 2: both bound together, the third still waiting.
    started = time.monotonic()
    remove_placeholder(cluster, HOLDS[0])
    wait_for(lambda: len(bound(cluster)) == 2, 120, "the world's minimum of 2 bound", interval=1)
    at_minimum = time.monotonic() - started
    time.sleep(10)
    assert len(bound(cluster)) == 2, "the third has no room yet"

    # Room for 3: the world grows.
    started = time.monotonic()
    remove_placeholder(cluster, HOLDS[1])
    wait_for(lambda: world_running(cluster, 3), 180, "the world grown to 3 Running", interval=1)
    print(f"\n[figures] Kubernetes gang, {WORKLOAD_API_BETA}, elastic 2:3: room for 1: none bound ({scheduled_condition_text(why)}); "
          f"room for 2: 2 bound {at_minimum:.1f} s after; room for 3: grown to 3 {time.monotonic() - started:.1f} s after")  # fmt: skip


@pytest.mark.timeout(1500)
def test_an_elastic_jobset_under_the_kubernetes_gang_starts_whole_at_its_minimum_grows_shrinks_and_trains_every_sample_once(
        workload_api_cluster, workload_api_stack):  # fmt: skip
    journey(workload_api_cluster, workload_api_stack, {"scheduler": "kubernetes"})
