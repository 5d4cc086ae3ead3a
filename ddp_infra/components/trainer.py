"""The training workload: a StatefulSet, or an Indexed Job when `workload.kind` is `job`.

Whether `pulumi up` waits for the pods (`workload.waitForReady`, default false):

- not waiting is the default. A training pod's readiness says little (no probe can tell a
  healthy rank from one stuck in rendezvous), and the provider awaits a Job until it
  *completes*, which for training means hours. Pulling a large image onto 64 nodes also takes
  longer than the provider's 10-minute default, and a timed-out await marks the update failed
  while the pods carry on, which invites a needless second `pulumi up`. So the workload gets
  the `pulumi.com/skipAwait` annotation: `pulumi up` returns once the objects are accepted,
  and the stack outputs give the kubectl commands to watch the pods and follow rank 0.
- `waitForReady: true` makes `pulumi up` fail loudly when pods cannot be scheduled (no GPU
  node, a bad image): it waits until every replica is Ready (a Job: until it completes), up
  to `workload.readyTimeout` (customTimeouts for create and update).

A finished Job is deleted by Kubernetes after `workload.ttlSecondsAfterFinished`. Pulumi does
not notice until a refresh; after `pulumi refresh` the next `pulumi up` creates the Job again,
and the trainer finds its run (same RUN_NAME) under /out and resumes from the last checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from trainer import contract

from ..config import StackConfig
from ..workload import workload_manifest
from ..world import World
from .base import Component


@dataclass(frozen=True)
class TrainerArgs:
    config: StackConfig
    world: World


class Trainer(Component):
    def __init__(self, name: str, args: TrainerArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("Trainer", name, opts)
        manifest = workload_manifest(args.config, args.world)
        workload_options = self.child(custom_timeouts=_timeouts(args.config))
        if args.world.workload_kind == contract.INDEXED_JOB:
            self.workload: pulumi.CustomResource = k8s.batch.v1.Job(
                name, metadata=manifest["metadata"], spec=manifest["spec"], opts=workload_options
            )
        else:
            self.workload = k8s.apps.v1.StatefulSet(
                name, metadata=manifest["metadata"], spec=manifest["spec"], opts=workload_options
            )
        self.register_outputs({"name": self.workload.metadata["name"]})  # type: ignore[attr-defined]


def _timeouts(config: StackConfig) -> Optional[pulumi.CustomTimeouts]:
    if not config.workload.wait_for_ready:
        return None  # the skipAwait annotation applies
    timeout = config.workload.ready_timeout
    return pulumi.CustomTimeouts(create=timeout, update=timeout)
