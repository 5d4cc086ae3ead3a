"""The program `__main__.py` runs: one explicit Kubernetes provider and the training stack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .components import DdpTrainingStack, DdpTrainingStackArgs
from .config import KubernetesConfig, StackConfig
from .world import World


def kubernetes_provider(config: KubernetesConfig, project_dir: Path) -> k8s.Provider:
    """The provider every resource uses.

    With `kubernetes.renderDir` it writes manifests (Secrets in plain text) under the project
    instead of touching a cluster. Switching that setting on or off replaces the provider,
    and with it every resource it manages.
    """
    render_dir = str(project_dir / config.render_dir) if config.render_dir else None
    return k8s.Provider("k8s", render_yaml_to_directory=render_dir, context=config.context)


def build(config: StackConfig, project_dir: Path) -> dict[str, Any]:
    """Register every resource of the stack; return the stack outputs."""
    world = World.from_config(config, pulumi.get_project(), pulumi.get_stack())
    provider = kubernetes_provider(config.kubernetes, project_dir)
    stack = DdpTrainingStack(
        "ddp", DdpTrainingStackArgs(config=config, world=world), opts=pulumi.ResourceOptions(providers=[provider])
    )
    return stack.outputs
