"""The namespace, when the stack creates it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi

from ..config import NamespaceConfig
from ..manifests import namespace_manifest
from .base import Component
from .kubernetes_object import KubernetesObject


@dataclass(frozen=True)
class TrainingNamespaceArgs:
    namespace: NamespaceConfig
    # Deleting a namespace deletes every claim in it, whatever the claim's own options say:
    # so the namespace is kept and protected exactly when a claim in it is.
    retain_on_delete: bool
    protect: bool
    # The strictest Pod Security Standard the pods meet, which the namespace enforces.
    pod_security: str
    retained_provider: pulumi.ProviderResource


class TrainingNamespace(Component):
    def __init__(self, name: str, args: TrainingNamespaceArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("Namespace", name, opts)
        manifest = namespace_manifest(args.namespace, args.pod_security)
        self.namespace = KubernetesObject(
            name,
            manifest,
            opts=self.child(
                retain_on_delete=args.retain_on_delete,
                protect=args.protect,
                provider=args.retained_provider if args.retain_on_delete else None,
            ),
        )
        self.register_outputs({"name": self.namespace.metadata["name"]})
