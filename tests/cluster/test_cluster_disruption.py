"""The dev stack's PodDisruptionBudget under the real Eviction API: a healthy training pod is
never evicted (a lost pod restarts the whole world), a crash-looping one always is (or it would
block every node drain and node-pool upgrade)."""

from __future__ import annotations

import json

import pytest

from cluster_testing import LONG_RUN, NAMESPACE, POD_NAMES, get, pods, wait_for, world_running

pytestmark = pytest.mark.timeout(900)


def evict(cluster, pod: str):
    """POSTs an Eviction for the pod, as `kubectl drain` does; returns kubectl's result."""
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": NAMESPACE}}
    return cluster.kubectl("create", "--raw", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}/eviction", "-f", "-",
                           input=json.dumps(eviction), check=False)


def _crash_looping(pod: dict) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return any(s.get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff" for s in statuses)


def test_a_training_pod_is_not_evicted(cluster, dev_world):
    dev_world(run__args=LONG_RUN)
    wait_for(lambda: world_running(cluster), 300, "both pods Running", interval=2)
    uid = get(cluster, "pod", POD_NAMES[1], NAMESPACE)["metadata"]["uid"]
    refused = evict(cluster, POD_NAMES[1])
    assert refused.returncode != 0 and "disruption budget" in refused.stderr, refused.stderr
    assert get(cluster, "pod", POD_NAMES[1], NAMESPACE)["metadata"]["uid"] == uid


def test_a_crash_looping_pod_can_be_evicted(cluster, dev_world):
    # A run whose module does not exist: torchrun fails, the kubelet restarts it, and backs off.
    # No restarts inside torchrun and the shortest join timeout: a pod restarted alone must not
    # wait the dev stack's 600 s for a peer that is itself backing off.
    dev_world(run__args=["-m", "trainer.no_such_module"], rendezvous__maxRestarts="0", rendezvous__joinTimeoutSeconds="30")
    looping = wait_for(lambda: next((n for n, p in pods(cluster, NAMESPACE).items() if _crash_looping(p)), None),
                       300, "a pod in CrashLoopBackOff", interval=2)
    uid = get(cluster, "pod", looping, NAMESPACE)["metadata"]["uid"]
    allowed = evict(cluster, looping)
    assert allowed.returncode == 0, allowed.stderr
    wait_for(lambda: looping not in pods(cluster, NAMESPACE) or get(cluster, "pod", looping, NAMESPACE)["metadata"]["uid"] != uid,
             180, "the evicted pod to be gone")
