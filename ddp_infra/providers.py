"""A world's Kubernetes providers: the caller's (`opts.provider` or `opts.providers`), or, when the
program hands it none, those the world makes from `kubernetes.*`: every object's, the retained
objects', and in render mode the namespace's when it is not retained."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Mapping, Optional

import pulumi
import pulumi_kubernetes as k8s

from .components.base import FormerName
from .config import KubernetesConfig, StackConfig

# Where, under the render directory, the namespace's manifest goes: before the provider's 1-manifest/.
NAMESPACE_RENDER_SUBDIR = "0-namespace"
RETAINED_RENDER_SUBDIR = "0-retained"


def kubernetes_provider(
    config: KubernetesConfig, name: str, render_subdir: str = "", adopt_existing: bool = False,
    opts: Optional[pulumi.ResourceOptions] = None,
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
        enable_server_side_apply=adopt_existing, opts=opts,
    )  # fmt: skip


def retained_provider(config: KubernetesConfig, name: str, opts: Optional[pulumi.ResourceOptions] = None) -> k8s.Provider:
    """The provider of the claims and the namespace that Pulumi keeps in the cluster on delete.

    It takes over an object already there (server-side apply): after `pulumi destroy`, the next
    `pulumi up` adopts the retained claims and the run resumes from their checkpoints. Only they
    get it, because Pulumi never deletes them: taking over an object that Pulumi later deletes
    under another resource name loses it. Every other object must not exist yet, so a second stack
    aimed at the same namespace fails with AlreadyExists instead of taking over the first's world.
    In render mode it writes under `0-retained/`, which sorts before the provider's `1-manifest/`,
    and in it the namespace's file before the claims' (`v1-namespace-…`, `v1-persistentvolumeclaim-…`).
    """
    return kubernetes_provider(config, name, RETAINED_RENDER_SUBDIR, adopt_existing=True, opts=opts)


def namespace_provider(
    config: KubernetesConfig, name: str, opts: Optional[pulumi.ResourceOptions] = None
) -> Optional[k8s.Provider]:
    """In render mode, a provider of its own for a namespace that is not retained, under `0-namespace/`.

    The provider names each manifest `<apiVersion>-<kind>-...yaml`, so in one directory the
    namespace's file (`v1-namespace-...`) sorts after `apps_v1-statefulset-...`, and a first
    `kubectl apply -R -f <renderDir>`, which applies files in name order, meets a namespace that
    does not exist yet. `0-namespace/` sorts before the provider's `1-manifest/`.
    """
    return kubernetes_provider(config, name, NAMESPACE_RENDER_SUBDIR, opts=opts) if config.render_dir else None


@dataclass(frozen=True)
class Providers:
    """A world's Kubernetes providers: every object's, the retained objects', and in render mode the
    namespace's when it is not retained (see the functions above)."""

    default: pulumi.ProviderResource
    retained: pulumi.ProviderResource
    namespace: Optional[pulumi.ProviderResource]

    @classmethod
    def of(cls, config: StackConfig, world_name: str, former_name: Optional[FormerName] = None) -> "Providers":
        """The providers a world makes from `kubernetes.*`, named `<world>-k8s`, `<world>-k8s-retained`
        and `<world>-k8s-namespace` (each with an alias to its name in an earlier layout)."""

        def named(role: str) -> dict[str, Any]:
            name = f"{world_name}-{role}"
            old = former_name(name) if former_name else None
            return {"name": name, "opts": pulumi.ResourceOptions(aliases=[pulumi.Alias(name=old)]) if old else None}

        kubernetes = config.kubernetes
        return cls(
            kubernetes_provider(kubernetes, **named("k8s")),
            retained_provider(kubernetes, **named("k8s-retained")),
            None if config.storage.namespace_retained else namespace_provider(kubernetes, **named("k8s-namespace")),
        )

    @classmethod
    def of_caller(
        cls, opts: Optional[pulumi.ResourceOptions], retained: Optional[pulumi.ProviderResource]
    ) -> Optional["Providers"]:
        """The Kubernetes provider the caller handed the world (`opts.provider`, or the one of its
        package in `opts.providers`), for every object; the retained objects get `retained` where
        one is handed in, else the same. None where the caller handed none."""
        given = caller_kubernetes_provider(opts)
        return cls(given, retained or given, None) if given else None


def caller_kubernetes_provider(opts: Optional[pulumi.ResourceOptions]) -> Optional[pulumi.ProviderResource]:
    if opts is None:
        return None
    candidates = [opts.provider] if opts.provider else []
    providers = opts.providers
    candidates += list(providers.values() if isinstance(providers, Mapping) else providers or [])
    return next((p for p in candidates if getattr(p, "package", None) == "kubernetes"), None)
