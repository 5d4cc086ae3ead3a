"""What keeps the world's pods to themselves: a ServiceAccount without an API token, a
NetworkPolicy that admits only the world's own pods, and a PodDisruptionBudget against
voluntary evictions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from ..manifests import disruption_budget_manifest, network_policy_manifest, service_account_manifest
from ..world import World
from .base import Component


@dataclass(frozen=True)
class GuardrailsArgs:
    world: World
    max_unavailable: int  # healthy pods a node drain may evict at once


class Guardrails(Component):
    def __init__(self, name: str, args: GuardrailsArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("Guardrails", name, opts)
        account = service_account_manifest(args.world)
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-sa",
            metadata=account["metadata"],
            automount_service_account_token=account["automountServiceAccountToken"],
            opts=self.child(),
        )
        policy = network_policy_manifest(args.world)
        self.network_policy = k8s.networking.v1.NetworkPolicy(
            f"{name}-netpol", metadata=policy["metadata"], spec=policy["spec"], opts=self.child()
        )
        budget = disruption_budget_manifest(args.world, args.max_unavailable)
        self.disruption_budget = k8s.policy.v1.PodDisruptionBudget(
            f"{name}-pdb", metadata=budget["metadata"], spec=budget["spec"], opts=self.child()
        )
        self.register_outputs({"serviceAccountName": self.service_account.metadata["name"]})
