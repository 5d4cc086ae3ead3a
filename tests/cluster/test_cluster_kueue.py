"""`scheduling.gang.scheduler: kueue` on a cluster running the real Kueue controller (built from its
Go module by toolchain/build.sh, started by LocalCluster as an add-on), with a ClusterQueue whose
quota is 3 pods: a world of 2 is admitted whole; a world of 4 is refused by the fit check before
anything changes, and, with the check only warning, admitted not at all, no pod of it starting,
the status view giving Kueue's reason; once the quota grows, it is admitted whole. Both as an
Indexed Job and as a JobSet. With a Topology (`scheduling.topology`): a world placed within one
rack, and one the rack cannot hold held back in Kueue's words; a world in slices of one pod within
a rack admitted, and a slice one host cannot hold held back.

The pods run the pause image in place of the trainer: admission is Kueue's and the scheduler's
business, and needs no training.
"""

from __future__ import annotations

import json
import time

import pytest

from cluster_testing import NAMESPACE, WORKLOAD, get, pods, status_view, wait_for, world_pods, world_running
from kueue_testing import (
    HOSTNAME, RESOURCE, SMALL_PODS, TOPOLOGY, admitted, admitted_pods, condition, held_back, placement, queued_namespace, remove_queues, set_quota,
    set_topology, suspended, waits_for,
)  # fmt: skip
from ddp_infra.config.scalars import parse_quantity
from trainer import contract

pytestmark = [pytest.mark.timeout(900), pytest.mark.controllers("kueue")]


@pytest.fixture
def quota(controllers_cluster):
    """Sets the ClusterQueue's quota of pods. A test asks for it before the stack, so that the queue
    goes after the stack's world: Kueue keeps a ClusterQueue that admitted workloads use (a finalizer)."""
    yield lambda pods_quota: set_quota(controllers_cluster, pods_quota)
    remove_queues(controllers_cluster)


@pytest.mark.parametrize("kind", [contract.INDEXED_JOB, contract.JOBSET])
def test_kueue_admits_a_world_whole_or_not_at_all(controllers_cluster, quota, pause_stack, kind):
    cluster = controllers_cluster
    quota(3)
    queued = {"workload__kind": kind, **queued_namespace(cluster, "team-a"), **SMALL_PODS}

    # A world of 2 in a quota of 3: admitted whole, both pods start.
    pause_stack.up(nodes=2, **queued)
    started = time.monotonic()
    workload = admitted(cluster, kind, "the world of 2")
    assert admitted_pods(workload) == 2
    wait_for(lambda: world_running(cluster, 2), 300, "both pods Running", interval=1)
    admitted_after = time.monotonic() - started
    assert not suspended(cluster, kind), "Kueue lifted the suspension"

    # A world of 4 in a quota of 3: refused before anything changes (the fit check reads the queue)...
    refused = pause_stack.preview(nodes=4, **queued)
    assert refused.returncode != 0, refused.describe()
    assert "the world's 4 pods together ask more than Kueue ClusterQueue worlds (LocalQueue team-a) can ever admit:" in refused.output
    assert "pods: 4 asked, at most 3 (flavor default-flavor: nominal quota 3)" in refused.output, refused.describe()
    # ...and, asked to only warn, held back whole. The old world is gone first (replace, delete first).
    pause_stack.up(nodes=4, **queued, scheduling__fitCheck="warn", workload__waitFor="none")
    held = held_back(cluster, kind)
    assert "insufficient quota for pods" in condition(held, "QuotaReserved")["message"], held["status"]
    assert "admission" not in held["status"]
    assert suspended(cluster, kind)
    assert pods(cluster, NAMESPACE) == {}, "no pod of a world Kueue holds back may exist"
    # `pulumi up` has what it waits for while the world waits in its queue, so it returns
    assert waits_for(cluster, kind), f"the workload's waitFor path is empty while queued: {get(cluster, RESOURCE[kind], WORKLOAD, NAMESPACE)}"
    # the status view, as the stack's output prints it, says why nothing runs, in Kueue's words
    status = status_view(cluster, pause_stack.outputs["statusCommand"])
    assert f"waiting: {kind} {WORKLOAD} is suspended: Kueue holds it (Pending: " in status, status
    assert "insufficient quota for pods" in status, status

    # The quota grows: the whole world of 4 is admitted, and all of it starts.
    quota(4)
    started = time.monotonic()
    workload = admitted(cluster, kind, "the world of 4")
    assert admitted_pods(workload) == 4
    wait_for(lambda: world_running(cluster, 4), 300, "all 4 pods Running", interval=1)
    assert sorted(world_pods(cluster)) == [0, 1, 2, 3]
    print(f"\n[figures] Kueue ({kind}): world of 2 admitted and Running {admitted_after:.1f} s after up; "
          f"world of 4 admitted and Running {time.monotonic() - started:.1f} s after the quota grew")  # fmt: skip


@pytest.mark.parametrize("kind", [contract.INDEXED_JOB, contract.JOBSET])
def test_up_ends_saying_the_world_waits_in_its_queue_in_kueues_words(controllers_cluster, quota, controllers_dev_image, controllers_stack, kind):
    """`pulumi up` of a world its queue cannot hold yet (the fit check only warning) waits
    `workload.waitSeconds` for it to be admitted, then ends with a warning that quotes Kueue,
    and the `worldState` output says the same."""
    cluster = controllers_cluster
    quota(1)
    queued = queued_namespace(cluster, "team-a")
    started = time.monotonic()
    controllers_stack.up(nodes=2, workload__kind=kind, **queued, **SMALL_PODS, scheduling__fitCheck="warn", workload__waitSeconds="10")
    returned_after = time.monotonic() - started
    held = held_back(cluster, kind)
    assert "insufficient quota for pods" in condition(held, "QuotaReserved")["message"], held["status"]
    assert suspended(cluster, kind) and pods(cluster, NAMESPACE) == {}
    said = f"warning: world: not admitted after 10 s: queued: {kind} {WORKLOAD} is suspended: Kueue holds it (Pending: "
    assert said in controllers_stack.up_output and "insufficient quota for pods" in controllers_stack.up_output, controllers_stack.up_output
    assert controllers_stack.outputs["worldState"].startswith(f"queued: {kind} {WORKLOAD} is suspended: Kueue holds it (Pending: ")
    print(f"\n[figures] Kueue ({kind}): pulumi up returned {returned_after:.1f} s after it began, "
          "the world held back in its queue")  # fmt: skip


def test_kueue_admits_a_job_with_spares_partly_down_to_its_world(controllers_cluster, quota, pause_stack):
    """nodes 2 and 2 spare pods in a quota of 3 pods: Kueue admits 3 of the 4 (its partial admission,
    down to the world the Job's annotation gives), lowers the Job's parallelism to 3, and 3 pods
    start: the world and one spare. (An elastic world is refused with Kueue: it would keep that size.)"""
    cluster = controllers_cluster
    quota(3)
    queued = {"workload__kind": contract.INDEXED_JOB, **queued_namespace(cluster, "team-a"), **SMALL_PODS}
    pause_stack.up(nodes=2, workload__sparePods=2, **queued)
    workload = admitted(cluster, contract.INDEXED_JOB, "the world and part of its spares")
    assert admitted_pods(workload) == 3
    job = get(cluster, "job", WORKLOAD, NAMESPACE)
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (3, 4)
    wait_for(lambda: world_running(cluster, 3), 300, "3 pods Running", interval=1)
    assert sorted(world_pods(cluster)) == [0, 1, 2]
    # an unchanged `up` leaves the admitted Job as Kueue made it
    pause_stack.up(nodes=2, workload__sparePods=2, **queued)
    assert get(cluster, "job", WORKLOAD, NAMESPACE)["metadata"]["uid"] == job["metadata"]["uid"]
    assert get(cluster, "job", WORKLOAD, NAMESPACE)["spec"]["parallelism"] == 3


BLOCK, RACK = "topology.example.com/block", "topology.example.com/rack"
NODE_DOMAINS = {BLOCK: "block-a", RACK: "rack-1"}


@pytest.fixture
def topology(controllers_cluster):
    """A Kueue Topology of blocks, racks and hosts over the node's labels, and a ClusterQueue whose
    only flavor places workloads by it, as an admin of a topology-aware cluster sets them up."""
    cluster = controllers_cluster
    labels = [f"{key}={value}" for key, value in NODE_DOMAINS.items()]
    cluster.kubectl("label", "node", cluster.node_name, "--overwrite", *labels)
    set_topology(cluster, [BLOCK, RACK, HOSTNAME], {BLOCK: NODE_DOMAINS[BLOCK]}, pods_quota=3)
    yield
    remove_queues(cluster)
    cluster.kubectl("label", "node", cluster.node_name, *[f"{key}-" for key in NODE_DOMAINS])


def test_kueue_places_a_world_within_one_domain_of_its_topology_level_or_holds_it_back_saying_why(
    controllers_cluster, topology, pause_stack
):
    cluster = controllers_cluster
    queued = {"workload__kind": contract.INDEXED_JOB, **queued_namespace(cluster, "team-a"), **SMALL_PODS}

    # Required within one rack: admitted with Kueue's assignment of both pods to the rack's one node.
    pause_stack.up(nodes=2, scheduling__topology={"level": RACK}, **queued)
    workload = admitted(cluster, contract.INDEXED_JOB, "the world within one rack")
    assert placement(workload) == {cluster.node_name: 2}, workload["status"]
    wait_for(lambda: world_running(cluster, 2), 300, "both pods Running", interval=1)
    assert {pod["spec"]["nodeName"] for pod in world_pods(cluster).values()} == {cluster.node_name}

    # Within one rack, two pods that the rack's node cannot hold together: held back whole, in
    # Kueue's words (the quota would admit them; the topology cannot), and the status view says so.
    node = json.loads(cluster.kubectl("get", "node", cluster.node_name, "-o", "json").stdout)
    too_big = f"{int(parse_quantity(node['status']['allocatable']['cpu']) * 750)}m"  # 3/4 of it each
    pause_stack.up(nodes=2, scheduling__topology={"level": RACK}, **{**queued, "resources__requests__cpu": too_big},
                   scheduling__fitCheck="warn", workload__waitFor="none")  # fmt: skip
    held = held_back(cluster, contract.INDEXED_JOB)
    reason = condition(held, "QuotaReserved")["message"]
    assert f'topology "{TOPOLOGY}" allows to fit only 1 out of 2 pod(s)' in reason, held["status"]
    assert suspended(cluster, contract.INDEXED_JOB) and pods(cluster, NAMESPACE) == {}
    status = status_view(cluster, pause_stack.outputs["statusCommand"])
    assert "allows to fit only 1 out of 2 pod(s)" in status, status

    # Slices: a world of 2 required within one block, in slices of 1 pod each within one rack, is
    # admitted; in one slice of 2 within one host, whose node cannot hold both, it is held back.
    sliced = {"level": BLOCK, "slice": {"level": RACK, "size": 1}}
    pause_stack.up(nodes=2, scheduling__topology=sliced, **queued)
    workload = admitted(cluster, contract.INDEXED_JOB, "the world in slices")
    assert placement(workload) == {cluster.node_name: 2}, workload["status"]
    wait_for(lambda: world_running(cluster, 2), 300, "both pods Running", interval=1)
    one_host = {"level": BLOCK, "slice": {"level": HOSTNAME, "size": 2}}
    pause_stack.up(nodes=2, scheduling__topology=one_host, **{**queued, "resources__requests__cpu": too_big},
                   scheduling__fitCheck="warn", workload__waitFor="none")  # fmt: skip
    held = held_back(cluster, contract.INDEXED_JOB)
    assert f'topology "{TOPOLOGY}" doesn\'t allow to fit any of 1 slice(s)' in condition(held, "QuotaReserved")["message"], held["status"]
    assert suspended(cluster, contract.INDEXED_JOB) and pods(cluster, NAMESPACE) == {}
