"""While `pulumi up` waits for the world (ddp_infra/ready_watch.py): the reasons it waits, reported
when they change. Through the real engine on the local cluster: tests/cluster/test_cluster_fit.py."""

from __future__ import annotations

import threading

from ddp_infra.ready_watch import not_ready_because, reasons_reported
from observe.kubectl import KubectlError
from observe.world_state import PodState, WorldState


def test_each_new_answer_is_reported_once_and_a_failed_look_changes_nothing():
    answers = [["pod 1: not scheduled"], ["pod 1: not scheduled"], KubectlError("timed out"), ["pod 1: not scheduled"],
               ["pod 1: trainer ErrImagePull"], [], ["pod 1: not scheduled"]]  # fmt: skip
    stop, reported = threading.Event(), []

    def look() -> list[str]:
        answer = answers.pop(0)
        if not answers:
            stop.set()
        if isinstance(answer, Exception):
            raise answer
        return answer

    reasons_reported(look, reported.append, stop, interval=0.001)

    assert reported == [
        "the world is not ready yet: pod 1: not scheduled",
        "the world is not ready yet: pod 1: trainer ErrImagePull",
        "the world is not ready yet: pod 1: not scheduled",  # again after the world stopped waiting
    ]


def test_a_failed_workload_is_said_before_the_pods_reasons():
    waiting = PodState(name="trainer-1-x", uid="u", index=1, phase="Pending", restarts=0, waiting="not scheduled: Insufficient cpu",
                       last_exit=None, deleting=False, created="2026-11-26T01:00:00Z")  # fmt: skip
    assert not_ready_because(WorldState(pods=(waiting,), ended=None, held=None)) == ["pod 1 (trainer-1-x): not scheduled: Insufficient cpu"]
    failed = WorldState(pods=(), ended="Failed: BackoffLimitExceeded: Job has reached the specified backoff limit", held=None)
    assert not_ready_because(failed) == ["the workload ended Failed: BackoffLimitExceeded: Job has reached the specified backoff limit"]
    assert not_ready_because(WorldState(pods=(), ended="Complete", held=None)) == []
