"""The claims for /data, /out and /models.

A claim's spec comes from its storage config alone (see `manifests.claim_manifest`), so changing
`nodes` or any pod setting leaves every claim untouched. A claim marked `retainOnDelete` stays in
the cluster when Pulumi deletes it; one marked `protect` cannot be deleted or replaced by Pulumi
at all (a spec change that would replace it fails instead). Existing claims (`create: false`)
are only mounted, never managed. A claim is registered only once `changes_allowed` resolves
(see `ddp_infra.claim_changes`): a change it cannot take stops the program before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi

from ..config import StorageConfig
from ..manifests import claim_manifest
from ..stand_ins import swapped
from .base import Component
from .kubernetes_object import KubernetesObject


@dataclass(frozen=True)
class TrainingStorageArgs:
    storage: StorageConfig
    namespace: str
    retained_provider: pulumi.ProviderResource
    changes_allowed: pulumi.Output[None]


class TrainingStorage(Component):
    def __init__(self, name: str, args: TrainingStorageArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("Storage", name, opts)
        self.claims: dict[str, KubernetesObject] = {}
        for role, volume in args.storage.volumes().items():
            if not volume.create:
                continue
            manifest = claim_manifest(role, volume, args.namespace)
            self.claims[role] = KubernetesObject(
                f"{name}-{role}",
                # (a storage class handed in as an Output in its place: ddp_infra.stand_ins)
                {**manifest, "spec": args.changes_allowed.apply(lambda _, spec=manifest["spec"]: pulumi.Output.from_input(swapped(spec)))},
                opts=self.child(
                    retain_on_delete=volume.retain_on_delete,
                    protect=volume.protect,
                    provider=args.retained_provider if volume.retain_on_delete else None,
                ),
            )
        self.register_outputs({role: claim.metadata["name"] for role, claim in self.claims.items()})
