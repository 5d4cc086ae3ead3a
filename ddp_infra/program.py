"""The program `__main__.py` runs: one explicit Kubernetes provider and the stack's training world."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from .access import require_access
from .claim_changes import CLAIMS_OUTPUT, recorded_claims, refuse_claim_changes
from .cluster_apis import require_cluster_apis
from .components import DdpTrainingWorld, DdpTrainingWorldArgs
from .config import KubernetesConfig, StackConfig
from .fit import require_world_fits
from .pod import pod_template
from .reachability import require_reachable_cluster
from .world import World
from .world_wait import WORLD_STATE_OUTPUT, world_state

WORLD_NAME = "ddp"  # the stack's one world: its resources are named `ddp-<role>`

# Where, under the render directory, the namespace's manifest goes: before the provider's 1-manifest/.
NAMESPACE_RENDER_SUBDIR = "0-namespace"
RETAINED_RENDER_SUBDIR = "0-retained"


def kubernetes_provider(
    config: KubernetesConfig, name: str = "k8s", render_subdir: str = "", adopt_existing: bool = False
) -> k8s.Provider:
    """The provider every resource uses (other names: see retained_provider and namespace_provider).

    With `kubernetes.renderDir` it writes manifests (Secrets base64-encoded, not encrypted)
    instead of touching a cluster. A relative renderDir is handed over as it is: the engine
    starts the provider in the project directory, so it lands there, and a clone of the project
    in another directory sees the same provider config (an absolute path would differ per clone
    and replace the provider, and with it every resource). Switching render mode on or off
    replaces the provider too.

    kubeconfig="": the provider reads $KUBECONFIG (or ~/.kube/config) itself. Left unset, the SDK
    would copy $KUBECONFIG's path into the provider's inputs, and the state would then depend on
    where the command ran: a clone, a CI runner or another KUBECONFIG would diff the provider.

    Server-side apply only where an object already there is to be adopted (adopt_existing): with
    it, pulumi-kubernetes 4.25 creates an object by applying it, which silently takes over one of
    the same name. Without it, a create is a create: an object already there is an AlreadyExists
    error, and updates are patches from the inputs Pulumi recorded.
    """
    render_dir = str(PurePosixPath(config.render_dir, render_subdir)) if config.render_dir else None
    return k8s.Provider(
        name, render_yaml_to_directory=render_dir, context=config.context, kubeconfig="",
        enable_server_side_apply=adopt_existing,
    )  # fmt: skip


def retained_provider(config: KubernetesConfig) -> k8s.Provider:
    """The provider of the claims and the namespace that Pulumi keeps in the cluster on delete.

    It takes over an object already there (server-side apply): after `pulumi destroy`, the next
    `pulumi up` adopts the retained claims and the run resumes from their checkpoints. Only they
    get it, because Pulumi never deletes them: taking over an object that Pulumi later deletes
    under another resource name loses it. Every other object must not exist yet, so a second stack
    aimed at the same namespace fails with AlreadyExists instead of taking over the first's world.
    In render mode it writes under `0-retained/`, which sorts before the provider's `1-manifest/`,
    and in it the namespace's file before the claims' (`v1-namespace-…`, `v1-persistentvolumeclaim-…`).
    """
    return kubernetes_provider(config, "k8s-retained", RETAINED_RENDER_SUBDIR, adopt_existing=True)


def namespace_provider(config: KubernetesConfig) -> Optional[k8s.Provider]:
    """In render mode, a provider of its own for a namespace that is not retained, under `0-namespace/`.

    The provider names each manifest `<apiVersion>-<kind>-...yaml`, so in one directory the
    namespace's file (`v1-namespace-...`) sorts after `apps_v1-statefulset-...`, and a first
    `kubectl apply -R -f <renderDir>`, which applies files in name order, meets a namespace that
    does not exist yet. `0-namespace/` sorts before the provider's `1-manifest/`.
    """
    return kubernetes_provider(config, "k8s-namespace", NAMESPACE_RENDER_SUBDIR) if config.render_dir else None


def last_deployment() -> pulumi.StackReference:
    """The stack itself, as its last deployment left it: the outputs the next run reads back."""
    itself = f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"
    return pulumi.StackReference(f"{pulumi.get_stack()}-last-deployment", stack_name=itself)


def build(config: StackConfig) -> dict[str, Any]:
    """Register every resource of the stack; return the stack outputs."""
    require_reachable_cluster(config.kubernetes, pulumi.get_stack())
    require_cluster_apis(config)
    world, template = checked_world(config)
    # a stack deployed before 0.2.0 upgrades in place
    return training_world(WORLD_NAME, world, template, Providers.of(config), last_deployment(), previous_layout=True)


def checked_world(config: StackConfig) -> tuple[World, dict[str, Any]]:
    """The world of a config and its pod template, once the cluster lets the caller make them and
    has room for them: refused before anything is registered."""
    world = World.from_config(config, pulumi.get_project(), pulumi.get_stack())
    template = pod_template(world)  # the one the fit check counts is the one the stack runs
    require_access(world, template)
    require_world_fits(world, template)
    return world, template


@dataclass(frozen=True)
class Providers:
    """The Kubernetes providers of a program: every object's, the retained objects', and in render
    mode the namespace's when it is not retained (see the functions above)."""

    default: k8s.Provider
    retained: k8s.Provider
    namespace: Optional[k8s.Provider]

    @classmethod
    def of(cls, config: StackConfig) -> "Providers":
        kubernetes = config.kubernetes
        return cls(kubernetes_provider(kubernetes), retained_provider(kubernetes),
                   None if config.storage.namespace_retained else namespace_provider(kubernetes))  # fmt: skip


def training_world(
    name: str, world: World, template: dict[str, Any], providers: Providers, last: pulumi.StackReference,
    previous_layout: bool = False, outputs_prefix: str = "",
) -> dict[str, Any]:
    """Register one world (see checked_world); return its outputs, each under `outputs_prefix`: the
    program's stack outputs, those the next run reads back (the claims, the world's state) too."""
    config = world.config
    claims_output, state_output = f"{outputs_prefix}{CLAIMS_OUTPUT}", f"{outputs_prefix}{WORLD_STATE_OUTPUT}"
    added = DdpTrainingWorld(
        name,
        DdpTrainingWorldArgs(
            world=world,
            pod_template=template,
            retained_provider=providers.retained,
            claim_changes_allowed=refuse_claim_changes(config.storage, world.namespace, last, claims_output),
            namespace_provider=providers.namespace,
            previous_layout=previous_layout,
        ),
        opts=pulumi.ResourceOptions(providers=[providers.default]),
    )
    return {
        **{f"{outputs_prefix}{key}": value for key, value in added.outputs.items()},
        claims_output: recorded_claims(config.storage, world.namespace),  # read back by the next run's refuse_claim_changes
        state_output: world_state(world, added.trainer.workload, last, added, state_output),
    }
