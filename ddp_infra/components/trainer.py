"""The training workload: an Indexed Job (the default), a StatefulSet (`workload.kind: statefulset`),
or a JobSet of one Indexed Job (`workload.kind: jobset`, on clusters with the JobSet controller),
and with a gang scheduler's admission the object that groups its pods: Volcano's PodGroup, or the
Workload of the Kubernetes scheduler's gang, which controls the world's Job (ddp_infra/gang.py).

A changed workload is replaced whole. Any spec change (`nodes`, the image, the run's args) deletes
the old workload, waits until its pods are gone (the provider's foreground delete: every pod gets
its SIGTERM checkpoint), then creates the new one, which resumes from that checkpoint. So there is
never a world that mixes pods of two shapes, one-pod-at-a-time roll, or two worlds writing one
`/out/<run>`; the rendezvous id carries the shape as well.

The provider waits only until the workload's controller has taken it (`pulumi.com/waitFor`: a
Job's start time, a StatefulSet's observed generation, a JobSet's replicated Jobs' status), not
`pulumi.com/skipAwait`, which would also skip waiting for the old world's deletion. `up` then waits
for the world itself, as `workload.waitFor` says (ddp_infra/world_wait.py).

A finished Job is deleted by Kubernetes after `workload.ttlSecondsAfterFinished`. Pulumi does
not notice until a refresh; after `pulumi refresh` the next `pulumi up` creates the Job again,
and the trainer finds its run (same RUN_NAME) under /out finished and trains nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pulumi

from trainer import contract

from .. import gang
from ..names import JOBSET_API_VERSION
from ..workload import workload_manifest
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
        world = args.world
        # The group of the world's pods, there before the first of them.
        self.pod_group = None
        if gang.uses(world, "volcano"):
            self.pod_group = KubernetesObject(f"{name}-pod-group", gang.pod_group_manifest(world, args.pod_template), opts=self.child())
        elif gang.writes_workload(world):
            # Its controllerRef and its list of templates cannot change (a kind switch replaces it, and
            # the Job it controls with it); a template's minCount can (a resize changes it in place).
            gang_options = self.child(delete_before_replace=True, replace_on_changes=["spec.controllerRef"])
            self.pod_group = KubernetesObject(f"{name}-gang-workload", gang.workload_api_manifest(world), opts=gang_options)
        other_types = [token for kind, token in TYPES.items() if kind != world.workload_kind]
        workload_options = self.child(
            *([self.pod_group] if self.pod_group else []),
            delete_before_replace=True,
            # A Job joins a gang only as a new Job (the Job controller makes the PodGroup of a Job
            # that never started): one that joins or leaves its gang's Workload is replaced too.
            replace_on_changes=["spec", "metadata.ownerReferences"],
            # The workload as another kind is this same resource: a kind switch is a replace too.
            aliases=[pulumi.Alias(type_=other) for other in other_types],
        )
        manifest = workload_manifest(world, args.pod_template)
        if self.pod_group is not None and gang.workload_controls_job(world):
            manifest["metadata"]["ownerReferences"] = self.pod_group.metadata.apply(lambda meta: owned_by(world, meta))
        self.workload = KubernetesObject(name, manifest, opts=workload_options)
        self.register_outputs({"name": self.workload.metadata["name"]})


def owned_by(world: World, workload_metadata: dict) -> Any:
    """The Job's ownerReferences to its gang's Workload; unknown in the preview that creates the
    Workload (the API server gives it its uid)."""
    uid = workload_metadata.get("uid")
    return gang.workload_owner(world, uid) if uid else pulumi.output.UNKNOWN


# Each workload kind's Pulumi type.
TYPES = {
    contract.INDEXED_JOB: type_token("batch/v1", "Job"),
    contract.STATEFULSET: type_token("apps/v1", "StatefulSet"),
    contract.JOBSET: type_token(JOBSET_API_VERSION, "JobSet"),
}
