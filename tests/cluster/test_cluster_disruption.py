"""The dev stack's PodDisruptionBudget under the real Eviction API: with maxUnavailable 0 a healthy
training pod is never evicted, and a crash-looping one always is (or it would block every node
drain and node-pool upgrade). The default, one eviction at a time, is in test_cluster_world_lifecycle.
On the controllers' cluster (its controllers manage none of these), beside the test cluster's journeys."""

from __future__ import annotations

import pytest

from cluster_testing import LONG_RUN, NAMESPACE, cluster_state, evict, get, pod_name, pods, wait_for, wait_for_world

pytestmark = pytest.mark.timeout(900)


def _crash_looping(pod: dict) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return any(s.get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff" for s in statuses)


def test_a_stack_that_refuses_evictions_keeps_its_training_pods(controllers_cluster, controllers_dev_image, controllers_stack):
    cluster = controllers_cluster
    controllers_stack.up(run__args=LONG_RUN, workload__maxUnavailable="0")
    wait_for_world(cluster)
    pod = pod_name(cluster, 1)
    uid = get(cluster, "pod", pod, NAMESPACE)["metadata"]["uid"]
    refused = evict(cluster, pod)
    assert refused.returncode != 0 and "disruption budget" in refused.stderr, refused.stderr
    assert get(cluster, "pod", pod, NAMESPACE)["metadata"]["uid"] == uid


def test_a_crash_looping_pod_can_be_evicted(controllers_cluster, controllers_dev_image, controllers_stack):
    # A StatefulSet (a Job replaces a failed pod instead) whose module does not exist: torchrun
    # fails, the kubelet restarts it, and backs off. No restarts inside torchrun and the shortest
    # join timeout: a pod restarted alone must not wait the dev stack's 600 s for a peer that is
    # itself backing off.
    cluster = controllers_cluster
    controllers_stack.up(run__args=["-m", "trainer.no_such_module"], rendezvous__maxRestarts="0",
                 rendezvous__joinTimeoutSeconds="30", workload__kind="statefulset", workload__maxUnavailable="0")  # fmt: skip
    # Between back-offs the kubelet restarts the container, which is then Ready for a while (no
    # readiness probe): evict a pod while it is crash-looping, and only then.
    evicted: dict[str, str] = {}

    def evict_a_crash_looping_pod() -> bool:
        for name, pod in pods(cluster, NAMESPACE).items():
            if _crash_looping(pod) and evict(cluster, name).returncode == 0:
                evicted.update(name=name, uid=pod["metadata"]["uid"])
                return True
        return False

    try:
        wait_for(evict_a_crash_looping_pod, 300, "a crash-looping pod evicted", interval=1)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{cluster_state(cluster)}") from None
    wait_for(lambda: (pod := pods(cluster, NAMESPACE).get(evicted["name"])) is None or pod["metadata"]["uid"] != evicted["uid"],
             180, "the evicted pod to be gone")  # fmt: skip
