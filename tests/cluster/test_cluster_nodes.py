"""The world across nodes, on a local cluster of three: node 0 shares the control plane's network
namespace, nodes 1 and 2 each have one of their own, with their own kubelet, containerd, pod
subnet, kube-proxy and kube-router, and a switch joins the three. Through the real `pulumi up`:
the dev world of 2 pods and a spare, one pod per node, trains over Gloo between nodes with the
stack's NetworkPolicy enforced on each node; a node holding a training pod crashes (its daemons
and containers killed, its network cut), the spare takes the lost pod's place within seconds
while Kubernetes still reports that pod Running, and the run ends as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import pytest
from trainer_testing import same_result

from cluster_testing import (
    CHECKPOINT_EVERY, DISRUPTED_RUN, NAMESPACE, cluster_state, get, is_store_pod, logged, pods, ranks, resumes, running,
    spares_waiting, status_view, wait_for, wait_for_checkpoint_after, wait_for_the_job_and_both_ranks_done, world_pods,
)  # fmt: skip
from conftest import RACK, RACKS
from policy_checks import the_network_policies_admit_only_the_world
from toolchain.cluster.network import node_ip, pod_cidr

pytestmark = pytest.mark.timeout(1500)

# 16 epochs: long enough for the spare to be seen waiting and a checkpoint before the crash, and
# for the world to train on after it.
RUN_ARGS = [*DISRUPTED_RUN[: DISRUPTED_RUN.index("--epochs") + 1], "16", *DISRUPTED_RUN[DISRUPTED_RUN.index("--epochs") + 2 :]]
# 500m a pod on nodes that advertise a third of the machine's 2 CPUs each: one world pod per node.
# Claims every node mounts at once (ReadWriteOnce ones would hold the world on one node).
SPARE = {"nodes": "2", "workload__sparePods": "1", "resources__requests__cpu": "500m", "run__args": RUN_ARGS,
         "rendezvous__maxRestarts": "10", "storage__datasets__accessMode": "ReadWriteMany",
         "storage__outputs__accessMode": "ReadWriteMany"}  # fmt: skip


def nodes_json(cluster) -> dict[str, dict]:
    return {node["metadata"]["name"]: node for node in json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]}


def condition(node: dict, kind: str) -> str | None:
    return next((c["status"] for c in node["status"].get("conditions", []) if c["type"] == kind), None)


def test_three_nodes_each_with_a_share_of_the_machine_joined_by_a_switch(nodes_cluster):
    cluster = nodes_cluster
    found = nodes_json(cluster)
    assert sorted(found) == sorted(node.name for node in cluster.nodes)
    cpus = {name: node["status"]["allocatable"]["cpu"] for name, node in found.items()}
    for each in cluster.nodes:
        node = found[each.name]
        assert condition(node, "Ready") == "True", cluster_state(cluster)
        assert [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"] == [each.ip]
        assert node["metadata"]["labels"][RACK] == RACKS[each.index][RACK]
        # each advertises a third of the machine's CPUs: the scheduler has a choice to make
        assert cpus[each.name] == f"{len(os.sched_getaffinity(0)) * 1000 // 3}m", cpus
        # its own namespace: its address on veth-node, the other nodes' pods reached through them
        links = cluster.in_namespace("ip", "-o", "addr", "show", "veth-node", node=each.name).stdout
        assert f"inet {each.ip}/24" in links, links
        for other in cluster.nodes:
            if other is not each:
                route = cluster.in_namespace("ip", "route", "get", pod_cidr(other.index).replace("0/24", "9"), node=each.name).stdout
                assert f"via {node_ip(other.index)} dev veth-node" in route, route


def test_a_node_lost_with_a_training_pod_on_it_costs_the_world_seconds_with_a_spare(
    nodes_cluster, nodes_dev_image, nodes_stack, reference_result
):
    cluster = nodes_cluster
    expected = reference_result(RUN_ARGS)
    control_plane, *others = (node.name for node in cluster.nodes)
    # The store's pod on node 0, whose namespace the control plane shares and which the test never
    # crashes: the node lost holds a training pod and not the store (whose loss re-forms the world
    # at a new store, another journey). Nodes 1 and 2 take pods again once the store is placed; the
    # fit check, which counts cordoned nodes out, only warns meanwhile.
    for name in others:
        cluster.kubectl("cordon", name)
    try:
        documents = nodes_stack.up(**SPARE, scheduling__fitCheck="warn")
        wait_for(lambda: [p["spec"].get("nodeName") for p in pods(cluster, NAMESPACE, store=True).values() if is_store_pod(p)] == [control_plane],
                 120, "the store's pod placed on node 0")  # fmt: skip
    finally:
        for name in others:
            cluster.kubectl("uncordon", name)

    # One pod per node (the stack spreads the world over kubernetes.io/hostname; 500m each fills a node).
    def spread() -> dict[int, str] | None:
        found = world_pods(cluster)
        placed = {index: pod["spec"].get("nodeName") for index, pod in found.items() if running(pod)}
        return placed if len(placed) == 3 else None

    try:
        placed = wait_for(spread, 240, "the world's 3 pods running", interval=2)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{cluster_state(cluster)}") from None
    assert sorted(placed.values()) == sorted(node.name for node in cluster.nodes), placed

    # The world trains across nodes (Gloo between them), its spare waits, a checkpoint is written.
    wait_for(lambda: spares_waiting(cluster) >= 1, 180, "the spare waiting in the rendezvous", interval=1)
    before = wait_for_checkpoint_after(cluster, CHECKPOINT_EVERY - 1)
    training = ranks(cluster)
    node_of = {pod["metadata"]["name"]: pod["spec"]["nodeName"] for pod in world_pods(cluster).values()}
    assert node_of[training[0]] != node_of[training[1]], node_of
    # NetworkPolicy holds across nodes: an outsider on a node without rank 0 reaches none of rank 0's ports.
    names = {0: training[0], 1: training[1]}
    outsider_node = next(name for name in others if name != node_of[training[0]])
    the_network_policies_admit_only_the_world(cluster, names, documents, outsider_node=outsider_node)

    # The node of a training pod (not node 0) crashes.
    lost = next(pod for pod in (training[0], training[1]) if node_of[pod] != control_plane)
    victim = node_of[lost]
    seen = set(resumes(cluster))
    lost_at = datetime.now(timezone.utc)
    cluster.crash_node(victim)
    resumed_at, line = wait_for(lambda: next((row for row in resumes(cluster) if row not in seen), None), 120,
                                f"the world resumed after {victim} crashed", interval=0.5)  # fmt: skip
    trained_at = wait_for(lambda: next((at for at, _, text in logged(cluster) if at > resumed_at and text.startswith("[TRAIN] ")), None),
                          120, "the first [TRAIN] line after the crash")  # fmt: skip
    # Kubernetes still counts the lost pod as Running on its node: the world did not wait for it.
    assert get(cluster, "pod", lost, NAMESPACE)["status"]["phase"] == "Running"
    assert lost not in ranks(cluster).values() and "world of " not in line, line
    assert int(line.split("ckpt-")[1][:8]) >= before["step"], (line, before)
    figures = {"resumed": round((resumed_at - lost_at).total_seconds(), 1),
               "first [TRAIN] line": round((trained_at - lost_at).total_seconds(), 1)}  # fmt: skip
    not_ready = wait_for(lambda: condition(nodes_json(cluster)[victim], "Ready") != "True" and datetime.now(timezone.utc), 180,
                         f"{victim} NotReady", interval=1)  # fmt: skip
    figures["node NotReady"] = round((not_ready - lost_at).total_seconds(), 1)
    # The status view names the lost node and the world's pod on it.
    lost_index = next(index for index, pod in world_pods(cluster).items() if pod["metadata"]["name"] == lost)
    status = status_view(cluster, nodes_stack.outputs["statusCommand"])
    assert f"[node] {victim} NotReady since " in status and f"pods {lost_index} ({lost})" in status, status
    print(f"\n[figures] job with a spare, node of a training pod crashed: seconds after the crash {figures}; {line}")

    # The node boots again; the run ends with the uninterrupted run's exact result.
    cluster.restart_node(victim)
    ended, done = wait_for_the_job_and_both_ranks_done(cluster)
    assert ended == "Complete", cluster_state(cluster)
    assert [same_result(done[rank]) for rank in ("0", "1")] == [expected.result()] * 2
