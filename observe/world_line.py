"""The world's state in one line, as `pulumi up` ends with it: `admitted and running (2/2 pods, step
128)`, `queued: <the queue's reason>`, `cannot create pods: <the controller's event>`,
`unschedulable: <the scheduler's message>`, `claim pending: <reason>`, `image not pulled: <reason>`,
and how far the world got (`Stage`), which `workload.waitFor` compares with what it waits for."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum
from typing import Optional

from .world_state import NOT_SCHEDULED, WorldState

GONE = ("gone: the workload was deleted since `up` applied it (a finished Job or JobSet is, after "
        "workload.ttlSecondsAfterFinished); `pulumi refresh`, then `pulumi up` creates it again")
IMAGE_NOT_PULLED = re.compile(r"\b(ErrImagePull|ImagePullBackOff|ErrImageNeverPull|InvalidImageName)\b")


class Stage(IntEnum):
    """How far a world got, in order: each stage includes the ones before it."""

    FAILED = -1  # it ended failed, or its workload is gone: it will get no further
    WAITING = 0  # not all there yet: queued, refused, unschedulable, its claims unbound
    ADMITTED = 1  # the cluster placed it: the least pods it trains with, each bound to a node
    RUNNING = 2  # that many pods running
    COMPLETE = 3  # a Job or JobSet that ended complete


@dataclass(frozen=True)
class WorldLine:
    stage: Stage
    text: str

    def reached(self, wanted: Stage) -> bool:
        return self.stage >= wanted


def world_line(state: WorldState, min_nodes: int, pods: int, step: Optional[int] = None) -> WorldLine:
    """`min_nodes`: the fewest pods the world trains with; `pods`: all it has (spares included);
    `step`: rank 0's last training step, where its log has one."""
    if state.ended == "Complete":
        return WorldLine(Stage.COMPLETE, "completed")
    if state.ended:
        return WorldLine(Stage.FAILED, state.ended[0].lower() + state.ended[1:])
    if not state.exists:
        return WorldLine(Stage.FAILED, GONE)
    if state.held:
        return WorldLine(Stage.WAITING, f"queued: {state.held}")
    live = list(state.live_pods.values())
    running = sum(pod.phase == "Running" for pod in live)
    if running >= min_nodes:
        return WorldLine(Stage.RUNNING, f"admitted and running ({running}/{pods} pods{'' if step is None else f', step {step}'})")
    if state.cannot_create:
        return WorldLine(Stage.WAITING, f"cannot create pods: {state.cannot_create}")
    if state.claims:
        return WorldLine(Stage.WAITING, f"claim pending: {state.claims[0]}")
    waiting = [pod.waiting for pod in live if pod.waiting]
    unscheduled = [why for why in waiting if why.startswith(NOT_SCHEDULED)]
    if unscheduled:
        return WorldLine(Stage.WAITING, f"unschedulable: {unscheduled[0][len(NOT_SCHEDULED):]}")
    placed = sum(pod.node is not None for pod in live)
    stage = Stage.ADMITTED if placed >= min_nodes else Stage.WAITING
    if pulls := [why for why in waiting if IMAGE_NOT_PULLED.search(why)]:
        return WorldLine(stage, f"image not pulled: {pulls[0]}")
    said = f"; {waiting[0]}" if waiting else ""
    if stage == Stage.ADMITTED:
        return WorldLine(stage, f"admitted, starting ({running}/{pods} pods running{said})")
    return WorldLine(stage, f"starting ({len(live)}/{pods} pods created, {placed} placed{said})")
