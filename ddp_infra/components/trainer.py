"""The training workload: an Indexed Job (the default), a StatefulSet (`workload.kind: statefulset`),
or a JobSet of one Indexed Job (`workload.kind: jobset`, on clusters with the JobSet controller),
and with Volcano's gang admission the PodGroup of its pods (ddp_infra/gang.py).

A changed workload is replaced whole. Any spec change (`nodes`, the image, the run's args) deletes
the old workload, waits until its pods are gone (the provider's foreground delete: every pod gets
its SIGTERM checkpoint), then creates the new one, which resumes from that checkpoint. So there is
never a world that mixes pods of two shapes, one-pod-at-a-time roll, or two worlds writing one
`/out/<run>`; the rendezvous id carries the shape as well.

What `pulumi up` waits for (`workload.waitForReady`, default false):

- not waiting is the default: the workload carries `pulumi.com/waitFor`, met as soon as its
  controller has taken it (a Job's start time, a StatefulSet's observed generation, a JobSet's
  replicated Jobs' status). A training
  pod's readiness says little, the provider awaits a Job until it *completes* (hours), and pulling
  a large image onto 64 nodes outlasts the provider's 10-minute default. The stack outputs give the
  kubectl commands that show where the run stands and follow rank 0. (`pulumi.com/skipAwait` would
  also skip waiting for the old world's deletion, so a replacement could start beside it.)
- `waitForReady: true` makes `pulumi up` wait until every replica is Ready (a Job: until it
  completes), up to `workload.readyTimeout` (customTimeouts for create and update), and say
  meanwhile why the world is not ready yet (ddp_infra/ready_watch.py).

A finished Job is deleted by Kubernetes after `workload.ttlSecondsAfterFinished`. Pulumi does
not notice until a refresh; after `pulumi refresh` the next `pulumi up` creates the Job again,
and the trainer finds its run (same RUN_NAME) under /out finished and trains nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi

from trainer import contract

from .. import gang
from ..config import WorkloadConfig
from ..workload import JOBSET_API_VERSION, workload_manifest
from ..world import World
from .base import Component
from .kubernetes_object import KubernetesObject, type_token


@dataclass(frozen=True)
class TrainerArgs:
    world: World
    pod_template: dict  # the world's one pod template (ddp_infra.pod.pod_template)


class Trainer(Component):
    def __init__(self, name: str, args: TrainerArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("Trainer", name, opts)
        # Volcano's group of the world's pods, there before the first of them.
        self.pod_group = (
            KubernetesObject("pod-group", gang.pod_group_manifest(args.world, args.pod_template), opts=self.child())
            if gang.uses(args.world, "volcano")
            else None
        )
        other_types = [token for kind, token in TYPES.items() if kind != args.world.workload_kind]
        workload_options = self.child(
            *([self.pod_group] if self.pod_group else []),
            custom_timeouts=_timeouts(args.world.config.workload),
            delete_before_replace=True,
            replace_on_changes=["spec"],
            # The workload as another kind is this same resource: a kind switch is a replace too.
            aliases=[pulumi.Alias(type_=other) for other in other_types],
        )
        self.workload = KubernetesObject(name, workload_manifest(args.world, args.pod_template), opts=workload_options)
        self.register_outputs({"name": self.workload.metadata["name"]})


# Each workload kind's Pulumi type.
TYPES = {
    contract.INDEXED_JOB: type_token("batch/v1", "Job"),
    contract.STATEFULSET: type_token("apps/v1", "StatefulSet"),
    contract.JOBSET: type_token(JOBSET_API_VERSION, "JobSet"),
}


def _timeouts(workload: WorkloadConfig) -> Optional[pulumi.CustomTimeouts]:
    if not workload.wait_for_ready:
        return None  # the waitFor annotation applies
    timeout = workload.ready_timeout
    return pulumi.CustomTimeouts(create=timeout, update=timeout)
