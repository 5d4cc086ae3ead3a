"""Where a run stands, in one view, on any cluster: the world's pods (phase, restarts, why one waits),
the newest checkpoint (its step and age, from rank 0's log), the last `[TRAIN]` figures, the
workload's end, and a node lost under its pods. The stack's `statusCommand` output prints this command ready to paste.

    python -m observe.status -n ddp-dev --workload job/trainer -l app.kubernetes.io/instance=trainer
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import Optional

from trainer.lines import DoneLine, TrainLine

from . import rank0_log as log
from .kubectl import Kubectl, KubectlError
from .progress import duration
from .world_state import WorldRef, WorldState, read_world


def rank0_log(kubectl: Kubectl, world: WorldRef, state: WorldState) -> str:
    """Rank 0's log with timestamps: its previous container's first, when it restarted."""
    pod = state.rank0_pod()
    if pod is None:
        return ""
    previous = kubectl.logs(pod.name, world.container, previous=True, timestamps=True) if pod.restarts else ""
    return previous + kubectl.logs(pod.name, world.container, timestamps=True)


def render(world: WorldRef, state: WorldState, timestamped_log: str, now: Optional[datetime] = None) -> str:
    now = now or datetime.now(timezone.utc)
    live = state.live_pods
    rows = [f"{world.kind} {world.name}: {state.ended or ('waiting' if state.held else 'running')}, "
            f"{len(live)} pod(s) of the world up"]  # fmt: skip
    for pod in state.pods:
        if not pod.live and pod.index in live:
            continue  # an earlier pod of an index that has a newer one
        why = f"  {pod.waiting}" if pod.waiting else ""
        rows.append(f"  pod {pod.index}  {pod.name:<28} {pod.phase:<10} restarts {pod.restarts}{why}")
    text = "\n".join(log.split_timestamp(row)[1] for row in timestamped_log.splitlines())
    checkpoint = log.newest_checkpoint(timestamped_log)
    if checkpoint:
        age = f", {duration((now - checkpoint.saved_at).total_seconds())} ago" if checkpoint.saved_at else ""
        rows.append(f"newest checkpoint: {checkpoint.name} at global step {checkpoint.step}{age}")
    else:
        rows.append("newest checkpoint: none in rank 0's log yet")
    rows.append(f"last {TrainLine.TAG} {(log.last_line(text, TrainLine.TAG) or ' none yet')[len(TrainLine.TAG):].strip()}")
    if done := log.last_line(text, DoneLine.TAG):
        rows.append(done)
    rows += [f"waiting: {wait}" for wait in state.waits()]
    rows += [f"[node] {lost}" for lost in state.lost_nodes]
    return "\n".join(rows)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m observe.status", description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--namespace", required=True)
    parser.add_argument("--workload", required=True, help="kind/name: job/trainer, statefulset/trainer, jobset/trainer")
    parser.add_argument("-l", "--selector", required=True, help="the label selector of the world's pods")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: kubectl's)")
    args = parser.parse_args(argv)
    kind, _, name = args.workload.partition("/")
    world = WorldRef(kind, name, args.selector)
    kubectl = Kubectl(args.namespace, args.context, args.kubeconfig)
    try:
        state = read_world(kubectl, world)
        print(render(world, state, rank0_log(kubectl, world, state)))
    except KubectlError as error:
        print(f"status: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
