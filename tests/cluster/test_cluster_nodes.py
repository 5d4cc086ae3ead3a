"""The world across nodes, on a local cluster of three: node 0 shares the control plane's network
namespace, nodes 1 and 2 each have one of their own, with their own kubelet, containerd, pod
subnet, kube-proxy and kube-router, and a switch joins the three. Through the real `pulumi up`:
the dev world of 2 pods and a spare, one pod per node, trains over Gloo between nodes with the
stack's NetworkPolicy enforced on each node; a node holding a training pod crashes (its daemons
and containers killed, its network cut), the spare takes the lost pod's place within seconds
while Kubernetes still reports that pod Running; the node boots again and the lost pod's
replacement waits as the next spare; another training pod's node is cut off the network while it
runs on, and the spare takes its place too; the run ends as an uninterrupted one. The fit check
counts node by node.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import pytest
from trainer_testing import same_result

from cluster_testing import (
    CHECKPOINT_EVERY, DISRUPTED_RUN, NAMESPACE, cluster_state, get, is_store_pod, logged, newest_checkpoint, pods, ranks, resumes, running,
    spares_waiting, status_view, wait_for, wait_for_checkpoint_after, wait_for_the_job_and_both_ranks_done, world_pods,
)  # fmt: skip
from conftest import RACK, RACKS
from policy_checks import the_network_policies_admit_only_the_world
from toolchain.cluster.network import node_ip, pod_cidr

pytestmark = pytest.mark.timeout(1500)

# 32 epochs: long enough for two losses, each once a spare waits and a checkpoint was written, with
# a node's noticed loss (50 s), its restart and the lost pod's replacement between them.
RUN_ARGS = [*DISRUPTED_RUN[: DISRUPTED_RUN.index("--epochs") + 1], "32", *DISRUPTED_RUN[DISRUPTED_RUN.index("--epochs") + 2 :]]
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


def test_a_pod_larger_than_any_node_is_refused_at_preview_though_the_nodes_together_have_room(nodes_cluster, nodes_stack):
    """The fit check counts node by node: three nodes of 666m each hold no pod that asks for 1 CPU,
    though together they advertise nearly 2."""
    preview = nodes_stack.preview(nodes="1", resources__requests__cpu="1")
    assert preview.returncode != 0, preview.describe()
    assert "ddp-infra:nodes asks for 1 pods at once, each requesting cpu 1, " in preview.output, preview.describe()
    assert "the cluster's 3 node(s) can ever hold 0 of them:" in preview.output, preview.describe()
    for node in nodes_cluster.nodes:
        assert f"node {node.name}: 0 (allocatable cpu {len(os.sched_getaffinity(0)) * 1000 // 3}m, " in preview.output, preview.describe()


def test_a_training_pods_node_crashed_or_cut_off_costs_a_world_with_a_spare_seconds(
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
    wait_for_checkpoint_after(cluster, CHECKPOINT_EVERY - 1)
    training = ranks(cluster)
    node_of = {pod["metadata"]["name"]: pod["spec"]["nodeName"] for pod in world_pods(cluster).values()}
    assert node_of[training[0]] != node_of[training[1]], node_of
    # NetworkPolicy holds across nodes: an outsider on a node without rank 0 reaches none of rank 0's ports.
    names = {0: training[0], 1: training[1]}
    outsider_node = next(name for name in others if name != node_of[training[0]])
    the_network_policies_admit_only_the_world(cluster, names, documents, outsider_node=outsider_node)

    # The node of a training pod (not node 0, the store's) crashes: its daemons and containers killed,
    # its network cut. Kubernetes still counts the lost pod Running: the world does not wait for it.
    victim, lost, figures = lose_a_training_pods_node(cluster, "crashed", cluster.crash_node)
    not_ready = wait_for(lambda: condition(nodes_json(cluster)[victim], "Ready") != "True" and datetime.now(timezone.utc), 180,
                         f"{victim} NotReady", interval=1)  # fmt: skip
    figures["node NotReady"] = round((not_ready - figures.pop("lost at")).total_seconds(), 1)
    # The status view names the lost node and the world's pod on it.
    lost_index = next(index for index, pod in world_pods(cluster).items() if pod["metadata"]["name"] == lost)
    status = status_view(cluster, nodes_stack.outputs["statusCommand"])
    assert f"[node] {victim} NotReady since " in status and f"pods {lost_index} ({lost})" in status, status
    print(f"\n[figures] job with a spare, the node of a training pod crashed: seconds after the crash {figures}")

    # The node boots again: the kubelet finds the lost pod's container gone, the Job replaces the
    # pod, and the replacement waits as the next spare.
    cluster.restart_node(victim)
    wait_for(lambda: spares_waiting(cluster) >= 1, 240, "the lost pod's replacement waiting as a spare", interval=1)

    # A training pod's node cut off the nodes' network while everything on it runs on (a partition),
    # then joined again: the world goes on without that pod, which can come back as a spare at most.
    cut, _, figures = lose_a_training_pods_node(cluster, "cut off", cluster.cut_node)
    figures.pop("lost at")
    cluster.cut_node(cut, connected=True)
    print(f"\n[figures] job with a spare, the node of a training pod cut off the network: seconds after the cut {figures}")

    ended, done = wait_for_the_job_and_both_ranks_done(cluster)
    assert ended == "Complete", cluster_state(cluster)
    assert [same_result(done[rank]) for rank in ("0", "1")] == [expected.result()] * 2


def lose_a_training_pods_node(cluster, what: str, fail) -> tuple[str, str, dict]:
    """Fails (`fail(node)`) the node of a training pod other than node 0 (the control plane's and the
    store's), once the world has checkpointed with a spare waiting; returns the node, the pod lost
    and the seconds to the resume and to the next [TRAIN] line. The world kept its size and resumed
    from a checkpoint at least as new as the last before the loss."""
    wait_for(lambda: spares_waiting(cluster) >= 1, 180, "a spare waiting in the rendezvous", interval=1)
    before = wait_for_checkpoint_after(cluster, newest_checkpoint(cluster)["step"])
    node_of = {pod["metadata"]["name"]: pod["spec"]["nodeName"] for pod in world_pods(cluster).values()}
    lost = next(pod for pod in ranks(cluster).values() if node_of[pod] != cluster.node_name)
    victim = node_of[lost]
    seen = set(resumes(cluster))
    lost_at = datetime.now(timezone.utc)
    fail(victim)
    resumed_at, line = wait_for(lambda: next((row for row in resumes(cluster) if row not in seen), None), 120,
                                f"the world resumed after {victim} {what}", interval=0.5)  # fmt: skip
    trained_at = wait_for(lambda: next((at for at, _, text in logged(cluster) if at > resumed_at and text.startswith("[TRAIN] ")), None),
                          120, f"the first [TRAIN] line after {victim} {what}")  # fmt: skip
    assert get(cluster, "pod", lost, NAMESPACE)["status"]["phase"] == "Running"
    assert lost not in ranks(cluster).values() and "world of " not in line, line
    assert int(line.split("ckpt-")[1][:8]) >= before["step"], (line, before)
    return victim, lost, {"lost at": lost_at, "resumed": round((resumed_at - lost_at).total_seconds(), 1),
                          "first [TRAIN] line": round((trained_at - lost_at).total_seconds(), 1), "line": line}  # fmt: skip
