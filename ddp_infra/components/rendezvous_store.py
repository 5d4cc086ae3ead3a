"""The c10d rendezvous store's pod, its Service and its NetworkPolicy (ddp_infra/rendezvous_store.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi

from .. import rendezvous_store
from ..world import World
from .base import Component
from .kubernetes_object import KubernetesObject


@dataclass(frozen=True)
class RendezvousStoreArgs:
    world: World


class RendezvousStore(Component):
    def __init__(self, name: str, args: RendezvousStoreArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("RendezvousStore", name, opts)
        world = args.world
        self.network_policy = KubernetesObject(f"{name}-netpol", rendezvous_store.network_policy_manifest(world), opts=self.child())
        self.service = KubernetesObject(name, rendezvous_store.service_manifest(world), opts=self.child())
        self.deployment = KubernetesObject(name, rendezvous_store.deployment_manifest(world), opts=self.child(self.network_policy))
        self.register_outputs({"endpoint": world.rdzv_endpoint})
