"""The program `__main__.py` runs: one explicit Kubernetes provider and the training stack."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .components import DdpTrainingStack, DdpTrainingStackArgs
from .config import KubernetesConfig, StackConfig
from .reachability import require_reachable_cluster
from .world import World


def kubernetes_provider(config: KubernetesConfig) -> k8s.Provider:
    """The provider every resource uses.

    With `kubernetes.renderDir` it writes manifests (Secrets base64-encoded, not encrypted)
    instead of touching a cluster. A relative renderDir is handed over as it is: the engine
    starts the provider in the project directory, so it lands there, and a clone of the project
    in another directory sees the same provider config (an absolute path would differ per clone
    and replace the provider, and with it every resource). Switching render mode on or off
    replaces the provider too.

    kubeconfig="": the provider reads $KUBECONFIG (or ~/.kube/config) itself. Left unset, the SDK
    would copy $KUBECONFIG's path into the provider's inputs, and the state would then depend on
    where the command ran: a clone, a CI runner or another KUBECONFIG would diff the provider.
    """
    return k8s.Provider("k8s", render_yaml_to_directory=config.render_dir, context=config.context, kubeconfig="")


def build(config: StackConfig) -> dict[str, Any]:
    """Register every resource of the stack; return the stack outputs."""
    require_reachable_cluster(config.kubernetes, pulumi.get_stack())
    world = World.from_config(config, pulumi.get_project(), pulumi.get_stack())
    provider = kubernetes_provider(config.kubernetes)
    stack = DdpTrainingStack(
        "ddp",
        DdpTrainingStackArgs(config=config, world=world),
        opts=pulumi.ResourceOptions(providers=[provider]),
    )
    return stack.outputs
