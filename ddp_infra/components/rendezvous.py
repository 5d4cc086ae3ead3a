"""The headless Service that gives every pod, pod 0 above all, a DNS name for rendezvous."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from ..manifests import rendezvous_service_manifest
from ..world import World
from .base import Component


@dataclass(frozen=True)
class RendezvousArgs:
    world: World


class Rendezvous(Component):
    def __init__(self, name: str, args: RendezvousArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("Rendezvous", name, opts)
        manifest = rendezvous_service_manifest(args.world)
        self.service = k8s.core.v1.Service(
            name, metadata=manifest["metadata"], spec=manifest["spec"], opts=self.child()
        )
        self.register_outputs({"name": self.service.metadata["name"]})
