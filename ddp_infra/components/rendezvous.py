"""The headless Service that gives every pod, pod 0 above all, a DNS name for rendezvous."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi

from ..manifests import rendezvous_service_manifest
from ..world import World
from .base import Component
from .kubernetes_object import KubernetesObject


@dataclass(frozen=True)
class RendezvousArgs:
    world: World


class Rendezvous(Component):
    def __init__(self, name: str, args: RendezvousArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("Rendezvous", name, opts)
        manifest = rendezvous_service_manifest(args.world)
        self.service = KubernetesObject(name, manifest, opts=self.child())
        self.register_outputs({"name": self.service.metadata["name"]})
