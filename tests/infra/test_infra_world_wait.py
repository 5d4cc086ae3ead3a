"""What `pulumi up` waits for and ends with (ddp_infra/world_wait.py): the looks, the lines said while
it waits, the bound, and the last line. On the local cluster through the real engine:
tests/cluster/test_cluster_fit.py, test_cluster_waiting.py, test_cluster_kueue.py, test_cluster_dev_stack.py."""

from __future__ import annotations

import subprocess

import pulumi

import infra_harness as harness
from ddp_infra.world_wait import NOT_LOOKED_AT, WORLD_STATE_OUTPUT, conclusion, wait_for_world
from observe.kubectl import KubectlError
from observe.world_line import Stage, WorldLine

QUEUED = WorldLine(Stage.WAITING, "queued: Kueue holds it")
UNSCHEDULED = WorldLine(Stage.WAITING, "unschedulable: 0/1 nodes are available: 1 Insufficient cpu")
ADMITTED = WorldLine(Stage.ADMITTED, "admitted, starting (0/2 pods running; trainer ContainerCreating)")
RUNNING = WorldLine(Stage.RUNNING, "admitted and running (2/2 pods)")


class Clock:
    """Time that passes only as the loop sleeps or looks."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def looks(clock: Clock, *answers, each_s: float = 5.0):
    """A look that returns (or raises) the answers in turn, the last one for good, each taking `each_s`."""
    answers_left = list(answers)

    def look() -> WorldLine:
        clock.now += each_s
        answer = answers_left.pop(0) if len(answers_left) > 1 else answers_left[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return look


def test_the_wait_ends_when_the_world_gets_there_saying_each_new_line_once(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    clock, said = Clock(), []
    look = looks(clock, QUEUED, QUEUED, KubectlError("the cluster is busy"), UNSCHEDULED, ADMITTED, RUNNING)
    line = wait_for_world(look, Stage.RUNNING, 600, said.append, clock=clock)
    assert line == RUNNING
    assert said == [f"waiting for the world to be running: {seen.text}" for seen in (QUEUED, UNSCHEDULED, ADMITTED)]
    clock.now = 0
    assert wait_for_world(looks(clock, QUEUED, ADMITTED), Stage.ADMITTED, 600, said.append, clock=clock) == ADMITTED


def test_a_refusal_that_names_the_next_pod_it_could_not_create_is_said_once(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    clock, said = Clock(), []
    refused = [WorldLine(Stage.WAITING, f'cannot create pods: Error creating: pods "trainer-0-{suffix}" is forbidden: exceeded quota: two-pods')
               for suffix in ("lwdkx", "9hkjg", "qdblc")]  # fmt: skip
    assert wait_for_world(looks(clock, *refused, RUNNING), Stage.RUNNING, 600, said.append, clock=clock) == RUNNING
    assert said == [f"waiting for the world to be running: {refused[0].text}"]


def test_the_wait_is_bounded_and_a_failed_world_ends_it_at_once(monkeypatch):
    slept = []
    monkeypatch.setattr("time.sleep", slept.append)
    clock = Clock()
    assert wait_for_world(looks(clock, UNSCHEDULED), Stage.RUNNING, 60, lambda _: None, interval_s=5, clock=clock) == UNSCHEDULED
    assert 55 <= clock.now <= 65 and all(s <= 5 for s in slept)
    clock.now = 0
    failed = WorldLine(Stage.FAILED, "failed: BackoffLimitExceeded")
    assert wait_for_world(looks(clock, QUEUED, failed), Stage.RUNNING, 600, lambda _: None, clock=clock) == failed
    assert clock.now == 10
    clock.now = 0
    gone = subprocess.TimeoutExpired("kubectl", 60)
    assert wait_for_world(looks(clock, gone), Stage.ADMITTED, 30, lambda _: None, clock=clock) is None


def test_the_last_line_says_whether_the_world_got_there_and_if_not_why():
    assert conclusion(RUNNING, Stage.ADMITTED, 120) == (True, "world: admitted and running (2/2 pods)")
    assert conclusion(UNSCHEDULED, Stage.RUNNING, 60) == (False, f"world: not running after 60 s: {UNSCHEDULED.text}")
    assert conclusion(WorldLine(Stage.FAILED, "failed: DeadlineExceeded"), Stage.WAITING, 0) == (False, "world: failed: DeadlineExceeded")
    assert conclusion(QUEUED, Stage.WAITING, 0) == (True, f"world: {QUEUED.text}")  # waitFor none: one look, whatever it shows
    assert conclusion(None, Stage.ADMITTED, 30) == (False, "world: not known: the cluster did not answer within 30 s")


@pulumi.runtime.test
def test_a_program_under_mocks_or_rendering_manifests_says_it_did_not_look():
    evaluation = harness.evaluate(harness.stack_file_config("dev"))
    assert evaluation.outputs[WORLD_STATE_OUTPUT] == NOT_LOOKED_AT
