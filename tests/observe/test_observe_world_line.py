"""The world's state in one line (observe/world_line.py), from the states the cluster gives; on the
local cluster each is produced and seen at the end of `pulumi up` (tests/cluster/test_cluster_fit.py,
test_cluster_waiting.py, test_cluster_kueue.py, test_cluster_dev_stack.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import pytest

from observe.world_line import Stage, world_line
from observe.world_state import PodState, WorldState

UNSCHEDULED = "not scheduled: 0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
NOT_PULLED = "trainer ErrImageNeverPull: Container image \"ddp-infra/none:1\" is not present with pull policy of Never"


def pod(index: int, phase: str = "Running", node: Optional[str] = "node-a", waiting: Optional[str] = None) -> PodState:
    return PodState(name=f"trainer-{index}-x", uid=str(index), index=index, phase=phase, restarts=0, waiting=waiting,
                    last_exit=None, deleting=False, created="2026-11-28T00:00:00Z", node=node)  # fmt: skip


def world(*pods: PodState, **fields) -> WorldState:
    return replace(WorldState(pods=pods, ended=None, held=None), **fields)


@pytest.mark.parametrize("state, stage, text", [
    (world(pod(0), pod(1)), Stage.RUNNING, "admitted and running (2/2 pods)"),
    (world(pod(0), pod(1), ended="Complete"), Stage.COMPLETE, "completed"),
    (world(ended="Failed: BackoffLimitExceeded: Job has reached the specified backoff limit"), Stage.FAILED,
     "failed: BackoffLimitExceeded: Job has reached the specified backoff limit"),
    (world(held="job trainer does not exist (yet)", exists=False), Stage.FAILED,
     "gone: the workload was deleted since `up` applied it (a finished Job or JobSet is, after "
     "workload.ttlSecondsAfterFinished); `pulumi refresh`, then `pulumi up` creates it again"),
    (world(held="job trainer is suspended: Kueue holds it (Pending: insufficient quota)"), Stage.WAITING,
     "queued: job trainer is suspended: Kueue holds it (Pending: insufficient quota)"),
    (world(pod(0), cannot_create='pods "trainer-1-x" is forbidden: exceeded quota: one-pod'), Stage.WAITING,
     'cannot create pods: pods "trainer-1-x" is forbidden: exceeded quota: one-pod'),
    (world(pod(0, "Pending", None, UNSCHEDULED), claims=("claim outputs-pvc Pending: ProvisioningFailed: storageclass.storage.k8s.io \"fast\" not found",)),
     Stage.WAITING, "claim pending: claim outputs-pvc Pending: ProvisioningFailed: storageclass.storage.k8s.io \"fast\" not found"),
    (world(pod(0), pod(1, "Pending", None, UNSCHEDULED)), Stage.WAITING, "unschedulable: " + UNSCHEDULED.split(": ", 1)[1]),
    (world(pod(0, "Pending", waiting=NOT_PULLED), pod(1, "Pending", waiting=NOT_PULLED)), Stage.ADMITTED, f"image not pulled: {NOT_PULLED}"),
    (world(pod(0), pod(1, "Pending", waiting="trainer ContainerCreating")), Stage.ADMITTED,
     "admitted, starting (1/2 pods running; trainer ContainerCreating)"),
    (world(pod(0, "Pending", None)), Stage.WAITING, "starting (1/2 pods created, 0 placed)"),
])  # fmt: skip
def test_each_state_has_its_line_and_its_stage(state, stage, text):
    line = world_line(state, min_nodes=2, pods=2)
    assert (line.stage, line.text) == (stage, text)


def test_running_counts_the_least_pods_the_world_trains_with_and_names_rank_0s_step():
    elastic = world(pod(0), pod(1), pod(2, "Pending", None, UNSCHEDULED))
    assert world_line(elastic, min_nodes=2, pods=4, step=128).text == "admitted and running (2/4 pods, step 128)"
    assert world_line(elastic, min_nodes=3, pods=4).stage == Stage.WAITING
    # a spare not yet running does not hold back a world that trains
    spare = world(pod(0), pod(1), pod(2, "Pending", waiting="trainer ContainerCreating"))
    assert world_line(spare, min_nodes=2, pods=3).stage == Stage.RUNNING


def test_the_stages_are_ordered_as_waitFor_reads_them():
    line = world_line(world(pod(0), pod(1)), min_nodes=2, pods=2)
    assert line.reached(Stage.ADMITTED) and line.reached(Stage.RUNNING) and not line.reached(Stage.COMPLETE)
    failed = world_line(world(ended="Failed: DeadlineExceeded"), min_nodes=2, pods=2)
    assert not failed.reached(Stage.WAITING)
