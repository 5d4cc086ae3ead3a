"""The world across nodes, on a local cluster of three: node 0 shares the control plane's network
namespace, nodes 1 and 2 each have one of their own, with their own kubelet, containerd, pod
subnet, kube-proxy and kube-router, and a switch joins the three. Through the real `pulumi up`:
the dev world of 2 pods and a spare (`workload.sparePods: 1`), one pod per node, trains over Gloo
between nodes with the stack's NetworkPolicy enforced on each node. Whatever takes a training pod,
the waiting spare takes its place within seconds, where the Job creates a replacement only after
its back-off (kubernetes#130881), and the lost pod's replacement waits as the next spare. In one
world: the pod's container SIGKILLed, the pod deleted, its node drained. In another: its node crashed
(daemons and containers killed, network cut) while Kubernetes still reports the pod Running, then
booted again; then another's node cut off the network while it runs on, and joined again. The
first run ends as an uninterrupted one; the second, longer than its journey, with the stack's
removal. A StatefulSet's world waits for its pod on a crashed node until an operator taints the
node out of service. A pod frozen whole, which Kubernetes calls Running, is killed for the liveness
probes it leaves unanswered and replaced. The fit check counts node by node. In the cluster's two
racks, Kueue's topology places a world within the rack with room and holds back one no rack holds.

Which pods train is decided as they join (a pod of the world that re-joins may itself end up
waiting as the spare), so the journey reads it from their logs (the newest `[DDP] process
global_rank=…` line of each rank) and from the rendezvous's own state in the store's pod.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone

import pytest
from trainer_testing import same_result, with_option

from cluster_testing import (
    CHECKPOINT_EVERY, DISRUPTED_RUN, NAMESPACE, cluster_state, first_world_formed_at, freeze_container, get, is_store_pod, job_condition, kill_container, logged,
    newest_checkpoint, paced, pause_pod_resources, pods, ranks, resumes, running, spares_waiting, status_view, wait_for,
    wait_for_checkpoint_after, wait_for_the_job_and_both_ranks_done, world_pods, world_running,
)  # fmt: skip
from conftest import RACK, RACKS, require_managers
import kueue_testing as kueue
from kueue_testing import set_topology
from elastic_journey import ELASTIC, RUN_ARGS as ELASTIC_RUN_ARGS, every_sample_of_each_epoch_trained_once, resized
from ddp_infra.config.workload import LivenessConfig
from ddp_infra.names import OUT_OF_SERVICE_TAINT
from policy_checks import the_network_policies_admit_only_the_world
from toolchain.cluster.network import node_ip, pod_cidr
from trainer import contract

pytestmark = pytest.mark.timeout(1500)

# Each world trains at a pace (cluster_testing.paced). 32 epochs of 32 steps, over 100 s: long
# enough for three losses, each once a spare waits and a checkpoint was written, with the Job's
# back-off between them (10 s, doubling with each failed pod); alone, the third came at step 384.
RUN_ARGS = paced(DISRUPTED_RUN, 32)
# Longer than any journey that ends once its losses are seen (a node's crash is noticed 50 to 100 s later).
NODE_FAULTS_RUN = paced(DISRUPTED_RUN, 400)
# The elastic journey's world (elastic_journey.py), a pod per node, longer than its journey too: it
# checks the epochs trained once it grew back, not the end of the run.
ELASTIC_ACROSS_NODES = {key: value for key, value in ELASTIC.items() if key != "run__args"}
ELASTIC_RUN = with_option(ELASTIC_RUN_ARGS, "--epochs", "400")
# 500m a pod on nodes that advertise a third of the machine's 2 CPUs each: one world pod per node.
# Claims every node mounts at once (ReadWriteOnce ones would hold the world on one node). Each loss
# costs the survivor one restart of its workers.
SPARE = {"nodes": "2", "workload__sparePods": "1", "resources__requests__cpu": "500m",
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


@pytest.fixture
def rack_topology(nodes_cluster):
    """A Kueue Topology of racks and hosts over the nodes' labels, and a ClusterQueue of 3 pods whose
    only flavor places workloads by it. A test asks for it before the stack: Kueue keeps a queue
    while a world it admitted exists."""
    require_managers(("kueue",))
    set_topology(nodes_cluster, [RACK, kueue.HOSTNAME], {"kubernetes.io/os": "linux"}, pods_quota=3)
    yield
    kueue.remove_queues(nodes_cluster)


def test_kueue_places_a_world_within_the_rack_with_room_or_holds_back_one_no_rack_can_hold(nodes_cluster, rack_topology, nodes_pause_stack):
    """A Kueue Topology of racks and hosts over the nodes' labels (rack-a: nodes 0 and 1; rack-b:
    node 2) and pods of 500m, one to a node: a world of 2 required within one rack goes to rack-a,
    the only rack with room for both; a world of 3, though the 3 nodes together hold it and the
    queue's quota admits it, is held back whole, since no rack holds 3, in Kueue's words, which the
    status view quotes."""
    cluster = nodes_cluster
    queued = {"workload__kind": contract.INDEXED_JOB, **kueue.queued_namespace(cluster, "team-a"), **pause_pod_resources("500m")}
    nodes_pause_stack.up(nodes=2, scheduling__topology={"level": RACK}, **queued)
    rack_a = {node.name for node in cluster.nodes if RACKS[node.index][RACK] == "rack-a"}
    workload = kueue.admitted(cluster, contract.INDEXED_JOB, "the world of 2 within one rack")
    assert kueue.placement(workload) == dict.fromkeys(rack_a, 1), workload["status"]
    wait_for(lambda: world_running(cluster, 2), 120, "both pods Running", interval=1)
    assert set(nodes_of_the_world(cluster).values()) == rack_a

    nodes_pause_stack.up(nodes=3, scheduling__topology={"level": RACK}, **queued, workload__waitFor="none")
    held = kueue.held_back(cluster, contract.INDEXED_JOB)
    reason = kueue.condition(held, "QuotaReserved")["message"]
    assert f'topology "{kueue.TOPOLOGY}" allows to fit only 2 out of 3 pod(s)' in reason, held["status"]
    assert kueue.suspended(cluster, contract.INDEXED_JOB) and pods(cluster, NAMESPACE) == {}
    status = status_view(cluster, nodes_pause_stack.outputs["statusCommand"])
    assert "allows to fit only 2 out of 3 pod(s)" in status, status


def test_a_spare_takes_a_lost_pods_place_within_seconds_whatever_took_it(nodes_cluster, nodes_dev_image, nodes_stack, reference_result):
    cluster = nodes_cluster
    the_world_across_nodes(cluster, nodes_stack, RUN_ARGS)
    job = get(cluster, "job", "trainer", NAMESPACE)
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (3, 3)
    # Computed once the world has formed, not while its pods start: beside the suite's other
    # workers, its two processes there made a live pod's first heartbeats come 5 to 6 s late.
    expected = reference_result(RUN_ARGS)
    losses = Losses(cluster)
    losses.lose("rank 0's pod: container SIGKILLed", lambda world: world[0], lambda pod: kill_container(cluster, pod))
    losses.lose("rank 1's pod deleted", lambda world: world[1], lambda pod: cluster.kubectl("delete", "pod", pod, "-n", NAMESPACE, "--wait=false"))
    # `kubectl drain` of a training pod's node: the budget lets it evict one of the 3 pods while all 3 run
    drains: dict[str, subprocess.Popen] = {}
    try:
        drained = losses.lose("a training pod's node drained", losses.not_on_node_0, lambda pod: drains.update(drain(cluster, pod)))
        (node, process), = drains.items()
        output, _ = process.communicate(timeout=240)
        assert process.returncode == 0 and f"evicting pod {NAMESPACE}/{drained}" in output, output
        assert node not in nodes_of_the_world(cluster).values()
    finally:  # the lost pod's replacement, the next spare, waits for the node (the other two are full)
        for node, process in drains.items():
            if process.poll() is None:
                process.kill()
                process.wait()
            cluster.kubectl("uncordon", node)
    losses.the_run_ends_as_an_uninterrupted_one(expected)


def test_a_training_pods_node_crashed_or_cut_off_costs_a_world_with_a_spare_seconds(nodes_cluster, nodes_dev_image, nodes_stack):
    cluster = nodes_cluster
    documents = the_world_across_nodes(cluster, nodes_stack, NODE_FAULTS_RUN)
    # NetworkPolicy holds across nodes: an outsider on a node without rank 0 reaches none of rank 0's ports.
    training, node_of = ranks(cluster), nodes_of_the_world(cluster)
    outsider_node = next(node.name for node in cluster.nodes[1:] if node.name != node_of[training[0]])
    the_network_policies_admit_only_the_world(cluster, {0: training[0], 1: training[1]}, documents, outsider_node=outsider_node)

    losses = Losses(cluster)
    frozen: list[int] = []
    try:
        # The node of a training pod (not node 0, the store's) crashes: its daemons and containers
        # killed, its network cut. Kubernetes still counts the lost pod Running: the world does not wait for it.
        lost = losses.lose("the node of a training pod crashed", losses.not_on_node_0, losses.crash_its_node)
        victim = node_of_pod(cluster, lost)
        figures = losses.figures["the node of a training pod crashed"]
        not_ready = not_ready_at(cluster, victim)
        figures["node NotReady"] = round((not_ready - losses.at[-1][0]).total_seconds(), 1)
        lost_pod = get(cluster, "pod", lost, NAMESPACE)
        assert lost_pod["status"]["phase"] == "Running", lost_pod
        # The status view names the lost node and the world's pod on it.
        lost_index = lost_pod["metadata"]["annotations"][contract.JOB_COMPLETION_INDEX_ANNOTATION]
        status = status_view(cluster, nodes_stack.outputs["statusCommand"])
        assert f"[node] {victim} NotReady since " in status and f"pods {lost_index} ({lost})" in status, status
        print(f"\n[figures] job with a spare, the node of a training pod crashed: seconds after the crash {figures}")
        # The node boots again: the kubelet finds the lost pod's container gone, the Job replaces the
        # pod, and the replacement waits as the next spare (the next loss waits for it).
        cluster.restart_node(victim)
        losses.crashed.remove(victim)

        # A training pod's node cut off the nodes' network while everything on it runs on (a partition),
        # then joined again: the world goes on without that pod, which can come back as a spare at most.
        cut_pod = losses.lose("the node of a training pod cut off", losses.not_on_node_0, losses.cut_its_node)
        assert get(cluster, "pod", cut_pod, NAMESPACE)["status"]["phase"] == "Running"
        cluster.cut_node(losses.cut.pop(), connected=True)

        # A training pod frozen whole, which Kubernetes calls Running: the world goes on with the
        # spare once the rendezvous counts the pod gone and the hang watch ends the stalled step,
        # without waiting for the kubelet to kill the pod (its liveness probe, then its grace period).
        losses.lose("a training pod frozen", lambda world: world[1], lambda pod: frozen.extend(freeze_container(cluster, pod)))
    finally:  # whatever failed, the nodes are back for the stack's removal: a crashed node's pods never end otherwise
        for node in losses.crashed:
            cluster.restart_node(node)
        for node in losses.cut:
            cluster.cut_node(node, connected=True)
        thaw(frozen)
    losses.only_the_lost_were_counted_gone()


def test_a_statefulsets_world_waits_for_a_crashed_nodes_pod_until_the_node_is_marked_out_of_service(nodes_cluster, nodes_dev_image, nodes_stack):
    """A StatefulSet starts no second pod of an ordinal while the first is not known to be gone, and
    `pulumi preview` warns so: here the world waits for its pod on a crashed node, then resumes
    once an operator taints the node out of service, as the docs say to."""
    cluster = nodes_cluster
    the_world_across_nodes(cluster, nodes_stack, NODE_FAULTS_RUN, workload__kind="statefulset", workload__sparePods="0")
    assert "ddp-infra:workload.kind is statefulset with nodes=2: a pod on a lost node is never replaced" in nodes_stack.up_output, nodes_stack.up_output
    losses = Losses(cluster)
    tainted: list[str] = []
    try:
        lost = losses.not_on_node_0(ranks(cluster))
        seen = set(resumes(cluster))
        crashed_at = datetime.now(timezone.utc)
        losses.crash_its_node(lost)
        victim = losses.crashed[-1]
        not_ready_at(cluster, victim)
        # The world waits: 30 s after the crash the pod is still bound to the lost node, and no world formed without it.
        time.sleep(max(0.0, 30 - (datetime.now(timezone.utc) - crashed_at).total_seconds()))
        waited = datetime.now(timezone.utc)
        assert [row for row in resumes(cluster) if row not in seen] == [], "a world formed without the lost pod"
        assert node_of_pod(cluster, lost) == victim
        status = status_view(cluster, nodes_stack.outputs["statusCommand"])
        assert f"[node] {victim} NotReady since " in status and f"({lost})" in status, status

        # An operator marks the node out of service: its pods are deleted, the StatefulSet starts the
        # ordinal again on a node that runs, and the world resumes from its newest checkpoint.
        cluster.kubectl("taint", "node", victim, OUT_OF_SERVICE_TAINT)
        tainted.append(victim)
        tainted_at = datetime.now(timezone.utc)
        resumed_at, line = wait_for(lambda: next((row for row in resumes(cluster) if row not in seen), None), 240,
                                    "the world resumed after the node was marked out of service", interval=1)  # fmt: skip
        trained_at = wait_for(lambda: next((at for at, _, text in logged(cluster) if at > resumed_at and text.startswith("[TRAIN] ")), None),
                              120, "the first [TRAIN] line after the resume")  # fmt: skip
        assert node_of_pod(cluster, lost) != victim  # a StatefulSet's pod keeps its name
        print(f"\n[figures] statefulset, the node of a training pod crashed: seconds to the taint {round((tainted_at - crashed_at).total_seconds(), 1)} "
              f"(waited for {round((waited - crashed_at).total_seconds(), 1)}); from the taint to the resume {round((resumed_at - tainted_at).total_seconds(), 1)}, "
              f"to the first [TRAIN] line {round((trained_at - tainted_at).total_seconds(), 1)}; {line}")  # fmt: skip
    finally:
        for node in tainted:
            cluster.kubectl("taint", "node", node, f"{OUT_OF_SERVICE_TAINT.split('=')[0]}-")
        for node in losses.crashed:
            cluster.restart_node(node)


def test_a_pod_frozen_whole_is_killed_and_replaced_not_waited_for(nodes_cluster, nodes_dev_image, nodes_stack):
    """A plain Job's world of 2, no spare, the stack's defaults. A pod whose every process is frozen
    is still Running to Kubernetes, and its peers' world waits for it: the kubelet kills it once it
    has answered no liveness probe for workload.liveness.seconds, then the pod's grace period
    (for a pod that restarts Never, the kubelet ignores the probe's own: kubernetes#119377), and
    the Job replaces it. Then a training pod's node is reclaimed: it crashes and its Node object is
    deleted. The journey ends once the world trains again."""
    cluster = nodes_cluster
    # A grace period of 30 s, not the stack's 120 (a smoke model's checkpoint takes a second): with
    # 120 the world resumed 157.8 and 158.4 s after the freeze, the pod killed at 144.0 and 144.6 s.
    grace = 30
    the_world_across_nodes(cluster, nodes_stack, NODE_FAULTS_RUN, workload__sparePods="0", workload__terminationGracePeriodSeconds=str(grace))
    losses = Losses(cluster, spare=False)
    frozen: list[int] = []
    try:
        lost = losses.lose("a training pod frozen", lambda world: world[1], lambda pod: frozen.extend(freeze_container(cluster, pod)),
                           within=LivenessConfig().seconds + grace + 120)  # fmt: skip
    finally:  # whatever failed: a frozen pod holds its Job until its grace period is out
        thaw(frozen)
    reasons = [(event["reason"], event["message"]) for event in events_of(cluster, lost)]
    assert any(reason == "Unhealthy" and message.startswith("Liveness probe failed") for reason, message in reasons), reasons
    killed = get(cluster, "pod", lost, NAMESPACE)["status"]
    assert killed["phase"] == "Failed" and killed["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137, killed
    ended = datetime.fromisoformat(killed["containerStatuses"][0]["state"]["terminated"]["finishedAt"].replace("Z", "+00:00"))
    print(f"\n[figures] job without a spare, a training pod frozen: killed {round((ended - losses.at[-1][0]).total_seconds(), 1)} s "
          f"after the freeze (grace period {grace} s)")  # fmt: skip

    # A training pod's node lost for good: it crashes and its Node object is deleted (what a cloud's
    # node controller does for a reclaimed instance). The pod garbage collector fails the pods bound
    # to no node, and the Job replaces them: the world does not wait for the node.
    def reclaimed(pod: str) -> None:
        losses.crash_its_node(pod)
        cluster.kubectl("delete", "node", losses.crashed[-1], "--wait=false")

    try:
        gone = losses.lose("a training pod's node reclaimed", losses.not_on_node_0, reclaimed, within=180)
        left = pods(cluster, NAMESPACE).get(gone)  # the pod garbage collector fails it, then deletes it
        assert left is None or left["status"]["phase"] == "Failed", left
    finally:  # the node boots again, and registers anew
        for node in losses.crashed:
            cluster.restart_node(node)
    losses.only_the_lost_were_counted_gone()


def test_an_elastic_world_goes_on_without_a_lost_node_and_grows_back_when_it_boots(nodes_cluster, nodes_dev_image, nodes_stack):
    """An elastic Job (`nodes: 2:3`, a pod per node) starts with a node cordoned: it trains at its
    minimum, and grows to 3 when the node is uncordoned, with no `pulumi up`. Then a training pod's
    node crashes: the world goes on at 2, though Kubernetes still calls the lost pod Running. The
    node boots again: the kubelet finds the pod's container gone, the Job replaces the pod and the
    world grows back to 3. Every sample of each epoch trained since the start was trained once (an
    elastic world's run to its end is the elastic JobSet's journey's)."""
    cluster = nodes_cluster
    figures: dict[str, float] = {}
    held_back = cluster.nodes[2].name
    cluster.kubectl("cordon", held_back)
    try:
        the_world_across_nodes(cluster, nodes_stack, ELASTIC_RUN, **ELASTIC_ACROSS_NODES, workload__sparePods="0")
        assert len(world_pods(cluster)) == 3 and newest_checkpoint(cluster)["world_size"] == 2  # the third is Pending: no node for it
    finally:
        cluster.kubectl("uncordon", held_back)
        uncordoned = datetime.now(timezone.utc)
    _, figures["a node uncordoned -> a world of 3 resumed"] = resized(cluster, uncordoned, 3, 2)

    wait_for_checkpoint_after(cluster, newest_checkpoint(cluster)["step"])
    losses = Losses(cluster, spare=False)
    try:
        lost = losses.not_on_node_0(ranks(cluster))
        crashed = datetime.now(timezone.utc)
        losses.crash_its_node(lost)
        _, figures["a training pod's node crashed -> a world of 2 resumed"] = resized(cluster, crashed, 2, 3)
        assert get(cluster, "pod", lost, NAMESPACE)["status"]["phase"] == "Running"  # to Kubernetes, still
        wait_for_checkpoint_after(cluster, newest_checkpoint(cluster)["step"])
        cluster.restart_node(losses.crashed.pop())
        booted = datetime.now(timezone.utc)
        _, figures["the node booted (Ready) -> a world of 3 resumed"] = resized(cluster, booted, 3, 2)
    finally:
        for node in losses.crashed:
            cluster.restart_node(node)
    print(f"\n[figures] elastic job of 2:3 on three nodes, seconds: {figures}")
    # Two whole epochs of the world of 3, then every epoch before its newest checkpoint's: each
    # sample trained once (a checkpoint of a step means every rank recorded it).
    grown = wait_for_checkpoint_after(cluster, newest_checkpoint(cluster)["step"])
    ended = wait_for(lambda: (epoch := newest_checkpoint(cluster)["epoch"]) >= grown["epoch"] + 2 and epoch, 120,
                     "two epochs trained by the world of 3", interval=1)  # fmt: skip
    every_sample_of_each_epoch_trained_once(cluster, ended, still_training=True)


def the_world_across_nodes(cluster, stack, run_args: list[str], **changes: str) -> list[dict]:
    """The dev world of 2 pods and a spare (or as `changes` say) brought up by `pulumi up`, one pod
    per node, the store's pod on node 0; returns once it trains across nodes (Gloo between them)
    with its spare waiting and a checkpoint written. The store's pod goes on node 0, whose namespace
    the control plane shares and which no journey crashes: a node lost holds a training pod and not
    the store (whose loss re-forms the world at a new store, another journey). Nodes 1 and 2 take
    pods again once the store is placed (a node cordoned before stays so, and an elastic world forms
    on the nodes left); the fit check, which counts cordoned nodes out, only warns meanwhile.
    Returns the objects `pulumi up` applied, as the cluster has them."""
    settings = {**SPARE, "run__args": run_args, **changes}
    spares = int(settings["workload__sparePods"])
    control_plane, *others = (node.name for node in cluster.nodes)
    schedulable = [name for name in others if not nodes_json(cluster)[name]["spec"].get("unschedulable")]
    world = min(int(settings["nodes"].split(":")[-1]) + spares, 1 + len(schedulable))  # a pod per node that takes pods
    for name in schedulable:
        cluster.kubectl("cordon", name)
    try:
        stack.up(**settings, scheduling__fitCheck="warn", workload__waitFor="none")  # placed once uncordoned
        wait_for(lambda: [p["spec"].get("nodeName") for p in pods(cluster, NAMESPACE, store=True).values() if is_store_pod(p)] == [control_plane],
                 120, "the store's pod placed on node 0")  # fmt: skip
    finally:
        for name in schedulable:
            cluster.kubectl("uncordon", name)

    # One pod per node (the stack spreads the world over kubernetes.io/hostname; 500m each fills a node).
    def spread() -> dict[int, str] | None:
        found = world_pods(cluster)
        placed = {index: pod["spec"].get("nodeName") for index, pod in found.items() if running(pod)}
        return placed if len(placed) == world else None

    try:
        placed = wait_for(spread, 240, f"the world's {world} pods running", interval=2)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{cluster_state(cluster)}") from None
    assert len(set(placed.values())) == world, placed
    if spares:
        try:
            wait_for(lambda: spares_waiting(cluster) >= spares, 180, "the spare waiting in the rendezvous", interval=1)
        except AssertionError as error:  # where the spare's pod stands: pending, pulling, crash-looping
            raise AssertionError(f"{error}\n{cluster_state(cluster)}") from None
    wait_for_checkpoint_after(cluster, CHECKPOINT_EVERY - 1)
    training, node_of = ranks(cluster), nodes_of_the_world(cluster)
    assert node_of[training[0]] != node_of[training[1]], node_of
    return stack.applied_objects()


class Losses:
    """The training pods a journey loses, one at a time, each once a spare waits and the world has
    checkpointed since; what each cost, and the worlds that formed, one per loss."""

    def __init__(self, cluster, spare: bool = True):
        self.cluster = cluster
        self.spare = spare  # a spare takes a lost pod's place; without one, the Job's replacement does
        self.figures: dict[str, dict] = {}
        self.worlds: set[tuple[datetime, str]] = set()  # the resumes seen so far: one per loss, none without one
        self.at: list[tuple[datetime, str]] = []  # (when, the lost pod's rendezvous address)
        self.crashed: list[str] = []  # nodes down, and cut off, until the journey brings them back
        self.cut: list[str] = []

    def crash_its_node(self, pod: str) -> None:
        self.crashed.append(node_of_pod(self.cluster, pod))
        self.cluster.crash_node(self.crashed[-1])

    def cut_its_node(self, pod: str) -> None:
        self.cut.append(node_of_pod(self.cluster, pod))
        self.cluster.cut_node(self.cut[-1])

    def not_on_node_0(self, world: dict[int, str]) -> str:
        """A training pod on a node other than node 0 (the control plane's and the store's)."""
        return next(pod for pod in world.values() if node_of_pod(self.cluster, pod) != self.cluster.node_name)

    def no_world_formed_since(self, what: str) -> None:
        # A spare, or a replacement that joins as one, leaves the world training: no other world forms.
        formed = [row for row in resumes(self.cluster) if row not in self.worlds]
        assert formed == [], f"a world formed again after {what}: {formed}\n" + lines_between(self.cluster, max(self.worlds, default=None), formed[0])

    def the_run_ends_as_an_uninterrupted_one(self, expected) -> None:
        """The Job completes, and its final world's two ranks end as an undisrupted world does (`expected`)."""
        ended, done = wait_for_the_job_and_both_ranks_done(self.cluster)
        assert ended == "Complete", cluster_state(self.cluster)
        self.only_the_lost_were_counted_gone()
        assert [same_result(done[rank]) for rank in ("0", "1")] == [expected.result()] * 2

    def only_the_lost_were_counted_gone(self) -> None:
        """No world formed since the last loss, and only a lost pod was counted as gone, after its
        loss: a live pod whose heartbeat came late was not, once the first world had formed. A pod
        dropped while the first world forms breaks no world: the rendezvous goes on forming it, and
        the pod joins again (a live pod's heartbeat was seen 5.1 s old in the run's first minutes,
        three clusters starting beside it)."""
        self.no_world_formed_since("the last loss")
        lines = logged(self.cluster)
        formed_at = first_world_formed_at(lines)
        gone = [(at, name, text) for at, name, text in lines if " counted as gone, " in text and formed_at and at > formed_at]
        assert [row for row in gone if not any(lost_at < row[0] and f": {address} (" in row[2] for lost_at, address in self.at)] == [], gone

    def lose(self, what: str, pick, fail, within: float = 120) -> str:
        """Fails (`fail(pod)`) the training pod `pick(ranks)` names; returns it. The world kept its size,
        resumed (within `within` s) from a checkpoint at least as new as the last before the loss, and trains on."""
        cluster = self.cluster
        waited_since = datetime.now(timezone.utc)
        try:
            if self.spare:
                wait_for(lambda: spares_waiting(cluster) >= 1, 240, "a spare waiting in the rendezvous", interval=1)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{cluster_state(cluster)}") from None
        before = wait_for_checkpoint_after(cluster, newest_checkpoint(cluster)["step"])  # the spare has waited a checkpoint long
        self.worlds.update(resumes(cluster))
        self.no_world_formed_since(f"the losses before {what}")
        assert job_condition(cluster) is None, f"the run ended before {what}"
        lost = pick(ranks(cluster))
        present = {pod["metadata"]["name"] for pod in world_pods(cluster).values()} - {lost}
        seen = set(resumes(cluster))  # the lost pod's lines go with it: new ones are told by time and text, not by count
        lost_at = datetime.now(timezone.utc)
        self.at.append((lost_at, rendezvous_address(cluster, lost)))
        fail(lost)
        try:
            resumed_at, line = wait_for(lambda: next((row for row in resumes(cluster) if row not in seen), None), within,
                                        f"the world resumed after {what}", interval=0.5)  # fmt: skip
        except AssertionError as error:
            polled = time.monotonic()
            resumes(cluster)
            error = f"{error} (one look at the logs took {time.monotonic() - polled:.1f} s)"
            raise AssertionError(f"{error}\n{cluster_state(cluster)}\n" + lines_between(cluster, (lost_at - timedelta(seconds=30), ""), (datetime.now(timezone.utc), ""))) from None
        trained_at = wait_for(lambda: next((at for at, _, text in logged(cluster) if at > resumed_at and text.startswith("[TRAIN] ")), None),
                              120, f"the first [TRAIN] line after {what}")  # fmt: skip
        # the same size, from the newest checkpoint there was (a SIGTERM writes one more, where it stopped)
        assert int(line.split("ckpt-")[1][:8]) >= before["step"], (what, line, before)
        assert "world of " not in line, line  # a resize says "world of N (was M)"; this world kept its size
        resumed_world = ranks(cluster)
        assert lost not in resumed_world.values(), f"a world of 2 formed without the lost pod: {'the spare' if self.spare else 'its replacement'} took its place"
        if self.spare:  # the spare took the lost pod's place, not the Job's replacement: every pod of the new world was there before the loss
            assert set(resumed_world.values()) <= present, (what, resumed_world, present)
        self.figures[what] = {"resumed": round((resumed_at - lost_at).total_seconds(), 1),
                              "first [TRAIN] line": round((trained_at - lost_at).total_seconds(), 1),
                              "spare and checkpoint awaited before": round((lost_at - waited_since).total_seconds(), 1)}  # fmt: skip
        print(f"\n[figures] job {'with a spare' if self.spare else 'without a spare'}, {what}: seconds after the loss {self.figures[what]}; {line}")
        self.worlds.add((resumed_at, line))
        return lost


def not_ready_at(cluster, node: str) -> datetime:
    """When the test first saw `node` not Ready (the node controller's verdict on a lost node)."""
    return wait_for(lambda: condition(nodes_json(cluster)[node], "Ready") != "True" and datetime.now(timezone.utc), 180,
                    f"{node} NotReady", interval=1)  # fmt: skip


def nodes_of_the_world(cluster) -> dict[str, str]:
    return {pod["metadata"]["name"]: pod["spec"].get("nodeName") for pod in world_pods(cluster).values()}


def node_of_pod(cluster, pod: str) -> str:
    return get(cluster, "pod", pod, NAMESPACE)["spec"]["nodeName"]


def events_of(cluster, pod: str) -> list[dict]:
    listed = cluster.kubectl("get", "events", "-n", NAMESPACE, "--field-selector", f"involvedObject.name={pod}", "-o", "json").stdout
    return json.loads(listed)["items"]


def rendezvous_address(cluster, pod: str) -> str:
    """The address a pod's torchrun joins the rendezvous with (--local-addr): its index's DNS name,
    which its replacement shares."""
    spec = pods(cluster, NAMESPACE)[pod]["spec"]
    return f"{spec['hostname']}.{spec['subdomain']}"


def lines_between(cluster, world: tuple[datetime, str] | None, formed: tuple[datetime, str]) -> str:
    """Every pod's log lines from the world before to the one that formed: why it formed."""
    since = world[0] if world else datetime.min.replace(tzinfo=timezone.utc)
    return "\n".join(f"{at:%H:%M:%S.%f} {name} {text}" for at, name, text in logged(cluster) if since <= at <= formed[0])


def thaw(frozen: list[int]) -> None:
    """SIGCONT to the processes freeze_container stopped, those still there: a frozen pod would hold
    the stack's next change or removal for its whole grace period."""
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def drain(cluster, pod: str) -> dict[str, subprocess.Popen]:
    """`kubectl drain` of the pod's node, started: {node: the drain}, which ends once its pods are gone."""
    node = node_of_pod(cluster, pod)
    argv = cluster.kubectl_argv("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=240s")
    return {node: subprocess.Popen(argv, env=cluster.kubectl_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)}
