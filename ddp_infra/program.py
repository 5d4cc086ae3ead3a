"""The program `__main__.py` runs: one explicit Kubernetes provider and the training stack."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .components import DdpTrainingStack, DdpTrainingStackArgs
from .config import KubernetesConfig, StackConfig
from .world import World


def kubernetes_provider(config: KubernetesConfig, retained: bool = False) -> k8s.Provider:
    """The provider of every object (`retained=True`: of the objects Pulumi keeps in the cluster on delete).

    With `kubernetes.renderDir` it writes manifests (Secrets in plain text) instead of touching
    a cluster. A relative renderDir is handed over as it is: the engine starts the provider in
    the project directory, so it lands there, and a clone of the project in another directory
    sees the same provider config (an absolute path would differ per clone and replace the
    provider, and with it every resource). Switching render mode on or off replaces the
    provider too.

    The claims and the namespace that Pulumi keeps in the cluster on delete get a provider of their
    own that takes over an object already there (`upsertExistingObjects`): after `pulumi destroy`,
    the next `pulumi up` adopts the retained claims and the run resumes from their checkpoints. Only
    they get it, because Pulumi never deletes them: upserting an object that Pulumi later deletes
    under another resource name loses it. Every other object must not exist yet, so a second stack
    aimed at the same namespace fails with AlreadyExists instead of taking over the first's world.
    """
    if retained:
        return k8s.Provider(
            "k8s-retained", render_yaml_to_directory=config.render_dir, context=config.context, upsert_existing_objects=True
        )
    return k8s.Provider("k8s", render_yaml_to_directory=config.render_dir, context=config.context)


def build(config: StackConfig) -> dict[str, Any]:
    """Register every resource of the stack; return the stack outputs."""
    world = World.from_config(config, pulumi.get_project(), pulumi.get_stack())
    provider = kubernetes_provider(config.kubernetes)
    retained = kubernetes_provider(config.kubernetes, retained=True)
    stack = DdpTrainingStack(
        "ddp",
        DdpTrainingStackArgs(config=config, world=world, retained_provider=retained),
        opts=pulumi.ResourceOptions(providers=[provider]),
    )
    return stack.outputs
