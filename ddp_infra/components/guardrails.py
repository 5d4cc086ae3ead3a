"""What keeps the world's pods to themselves: a ServiceAccount without an API token, a
NetworkPolicy that admits only the world's own pods, and a PodDisruptionBudget against
voluntary evictions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi

from ..manifests import disruption_budget_manifest, network_policy_manifest, service_account_manifest
from ..world import World
from .base import Component
from .kubernetes_object import KubernetesObject


@dataclass(frozen=True)
class GuardrailsArgs:
    world: World


class Guardrails(Component):
    def __init__(self, name: str, args: GuardrailsArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("Guardrails", name, opts)
        self.service_account = KubernetesObject(f"{name}-sa", service_account_manifest(args.world), opts=self.child())
        self.network_policy = KubernetesObject(f"{name}-netpol", network_policy_manifest(args.world), opts=self.child())
        self.disruption_budget = KubernetesObject(f"{name}-pdb", disruption_budget_manifest(args.world), opts=self.child())
        self.register_outputs({"serviceAccountName": self.service_account.metadata["name"]})
