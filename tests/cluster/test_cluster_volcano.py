"""`scheduling.gang.scheduler: volcano` on a cluster running Volcano's real scheduler (built from its
Go module by toolchain/build.sh, started by LocalCluster as an add-on), with a Queue whose
capability holds 3 of the world's pods: a world of 2 is bound whole; a world of 4 is refused by the
fit check before anything changes, and, with the check only warning, bound not at all, no pod of it
reaching a node, its PodGroup kept out of the queue by the `minResources` the stack gave it, the
status view giving Volcano's reason; once the queue's capability grows, the whole world is bound. As an Indexed Job, whose
controller creates every pod at once, so only Volcano holds them back.

The pods run the pause image in place of the trainer.
"""

from __future__ import annotations

import time

import pytest

from cluster_testing import NAMESPACE, WORKLOAD, apply, bound, get, pause_pod_resources, pods, status_view, wait_for, world_pods, world_running
from ddp_infra import gang

pytestmark = [pytest.mark.timeout(900), pytest.mark.controllers("volcano")]

QUEUE = "research"
POD_CPU_MILLIS = 100
SMALL_PODS = pause_pod_resources(f"{POD_CPU_MILLIS}m")


def set_capability(cluster, pods_worth: int) -> None:
    """The queue holds `pods_worth` of the world's pods, by CPU."""
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": QUEUE},
        "spec": {"weight": 1, "reclaimable": False, "capability": {"cpu": f"{pods_worth * POD_CPU_MILLIS}m", "memory": "100Gi"}},
    }  # fmt: skip
    apply(cluster, [queue])


@pytest.fixture
def capability(controllers_cluster):
    """Sets the queue's capability. A test asks for it before the stack, so that the queue goes
    after the stack's world."""
    yield lambda pods_worth: set_capability(controllers_cluster, pods_worth)
    controllers_cluster.kubectl("delete", "queue.scheduling.volcano.sh", QUEUE, "--ignore-not-found", "--wait=true", "--timeout=120s")


def pod_group(cluster) -> dict:
    return get(cluster, "podgroups.scheduling.volcano.sh", WORKLOAD, NAMESPACE)


def test_volcano_binds_a_world_whole_or_not_at_all(controllers_cluster, capability, pause_stack):
    cluster = controllers_cluster
    queued = {"scheduling__gang": {"scheduler": "volcano", "queue": QUEUE}, **SMALL_PODS}
    capability(3)

    # A world of 2 in a queue that holds 3 pods: bound whole by Volcano.
    started = time.monotonic()
    pause_stack.up(nodes=2, **queued)
    wait_for(lambda: world_running(cluster, 2), 300, "both pods Running", interval=1)
    bound_after = time.monotonic() - started
    assert {pod["spec"]["schedulerName"] for pod in world_pods(cluster).values()} == {gang.VOLCANO_SCHEDULER}
    assert wait_for(lambda: pod_group(cluster).get("status", {}).get("phase") == "Running", 60, "the PodGroup Running")

    # A world of 4: its PodGroup would ask for 4 pods' CPU, more than the queue holds: refused
    # before anything changes...
    refused = pause_stack.preview(nodes=4, **queued)
    assert refused.returncode != 0, refused.describe()
    assert f"the world's 4 pods together ask more than Volcano Queue {QUEUE} can ever admit:" in refused.output, refused.describe()
    assert f"cpu: {4 * POD_CPU_MILLIS}m asked, at most {3 * POD_CPU_MILLIS}m (capability {3 * POD_CPU_MILLIS}m)" in refused.output
    # ...and, asked to only warn, created: the Job's controller creates all 4 pods; none of them is bound.
    pause_stack.up(nodes=4, **queued, scheduling__fitCheck="warn", workload__waitFor="none")
    group = pod_group(cluster)
    assert group["spec"]["minMember"] == 4 and group["spec"]["minResources"]["cpu"] == f"{4 * POD_CPU_MILLIS}m"
    wait_for(lambda: len(pods(cluster, NAMESPACE)) == 4, 120, "the Job's controller to create 4 pods", interval=1)
    held = wait_for(lambda: (g := pod_group(cluster)).get("status", {}).get("conditions") and g, 120,
                    "Volcano to try the world of 4 and record why it waits", interval=1)  # fmt: skip
    assert held["status"].get("phase") == "Pending", held["status"]
    assert bound(cluster) == [], "no pod of a world Volcano holds back may reach a node"
    # the status view, as the stack's output prints it, says why nothing runs, in Volcano's words
    status = status_view(cluster, pause_stack.outputs["statusCommand"])
    assert f"waiting: Volcano holds PodGroup {held['metadata']['name']} (Pending; " in status, status

    # The queue grows: the whole world of 4 is bound.
    capability(4)
    started = time.monotonic()
    wait_for(lambda: world_running(cluster, 4), 300, "all 4 pods Running", interval=1)
    assert len(bound(cluster)) == 4
    why = [(c["type"], c.get("reason"), c.get("message")) for c in held["status"]["conditions"]]
    print(f"\n[figures] Volcano (job): world of 2 bound and Running {bound_after:.1f} s after up; world of 4 held back "
          f"(PodGroup {why}), then Running {time.monotonic() - started:.1f} s after the queue grew")  # fmt: skip
