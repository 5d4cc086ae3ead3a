"""A training world: every component of one, wired in dependency order.

DdpTrainingWorld is the component a Pulumi program adds: its children are named after it
(`<world>-storage`, `<world>-trainer`, ...), so two worlds live side by side in one program and one
state. Its type is the package's own token; the layout before 0.2.0 (type `ddp-infra:training:Stack`,
children named by role alone) is taken over through aliases where `previous_layout` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pulumi

from ..pod_security import pod_security_level
from ..world import World
from .base import Component, FormerName
from .guardrails import Guardrails, GuardrailsArgs
from .hf_token import HfTokenSecret, HfTokenSecretArgs
from .namespace import TrainingNamespace, TrainingNamespaceArgs
from .rendezvous import Rendezvous, RendezvousArgs
from .rendezvous_store import RendezvousStore, RendezvousStoreArgs
from .secret_env import SecretEnv, SecretEnvArgs
from ..secrets_digest import secret_values, with_secrets_digest
from .storage import TrainingStorage, TrainingStorageArgs
from .trainer import Trainer, TrainerArgs


# The world's Pulumi type, and the one it had before 0.2.0.
WORLD_TYPE = "ddp-infra:index:DdpTrainingWorld"
LAYOUT_0_1_TYPE = "ddp-infra:training:Stack"


@dataclass(frozen=True)
class DdpTrainingWorldArgs:
    world: World  # and the config it carries
    # the world's one pod template (ddp_infra.pod.pod_template): the namespace's security level and the workload's
    pod_template: dict[str, Any]
    # the provider of what Pulumi keeps in the cluster on delete (see program.kubernetes_provider)
    retained_provider: pulumi.ProviderResource
    # resolves once the claims may be registered (see ddp_infra.claim_changes)
    claim_changes_allowed: pulumi.Output[None]
    # The provider of the namespace when it is not the stack's own (see program.namespace_provider).
    namespace_provider: Optional[pulumi.ProviderResource] = None
    # This world's stack was deployed by ddp-infra before 0.2.0 (its resources named by role alone):
    # each resource takes over its old self through an alias, and the upgrade replaces nothing. One
    # world of a program at most: two would both claim the old names.
    previous_layout: bool = False


def layout_0_1_name(world_name: str, world: World) -> FormerName:
    """Each resource's name before 0.2.0, from its name now: the name without the world's prefix,
    but for the namespace (then named as the namespace) and Volcano's pod group (then `pod-group`)."""
    special = {"namespace": world.namespace, f"{world.workload_name}-pod-group": "pod-group"}

    def former(name: str) -> Optional[str]:
        role = name.removeprefix(f"{world_name}-")
        return special.get(role, role) if role != name else None

    return former


class DdpTrainingWorld(Component):
    def __init__(self, name: str, args: DdpTrainingWorldArgs, opts: Optional[pulumi.ResourceOptions] = None):
        world = args.world
        self.former_name = layout_0_1_name(name, world) if args.previous_layout else None
        if args.previous_layout:
            opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(aliases=[pulumi.Alias(type_=LAYOUT_0_1_TYPE)]))
        super().__init__("World", name, opts, type_=WORLD_TYPE)
        config = world.config
        in_namespace: list[pulumi.Resource] = []
        if config.namespace.create:
            self.namespace: Optional[TrainingNamespace] = TrainingNamespace(
                f"{name}-namespace",
                TrainingNamespaceArgs(
                    namespace=config.namespace,
                    retain_on_delete=config.storage.namespace_retained,
                    protect=config.storage.namespace_protected,
                    pod_security=pod_security_level(args.pod_template["spec"]),
                    retained_provider=args.retained_provider,
                ),
                opts=pulumi.ResourceOptions(
                    parent=self, providers=[args.namespace_provider] if args.namespace_provider else None
                ),
            )
            in_namespace.append(self.namespace)
        else:
            self.namespace = None

        def inside(*after: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, depends_on=[*in_namespace, *after])

        self.storage = TrainingStorage(
            f"{name}-storage",
            TrainingStorageArgs(
                storage=config.storage, namespace=world.namespace, retained_provider=args.retained_provider,
                changes_allowed=args.claim_changes_allowed,
            ),
            opts=inside(),
        )
        self.hf_token = (
            HfTokenSecret(f"{name}-hf-token", HfTokenSecretArgs(world=world, token=config.hf_token), opts=inside())
            if config.hf_token is not None
            else None
        )
        self.secret_env = (
            SecretEnv(f"{name}-secret-env", SecretEnvArgs(world=world, values=config.secret_env), opts=inside())
            if config.secret_env
            else None
        )
        self.rendezvous = Rendezvous(f"{name}-rendezvous", RendezvousArgs(world=world), opts=inside())
        self.guardrails = Guardrails(f"{name}-guardrails", GuardrailsArgs(world=world), opts=inside())
        # Not among what the pods wait for: the store's pod starts beside them (each pod's preflight
        # waits for it), not before them, and a first image pull is not paid twice in a row.
        self.rendezvous_store = (
            RendezvousStore(f"{name}-rendezvous-store", RendezvousStoreArgs(world=world), opts=inside(self.guardrails))
            if world.has_rendezvous_store
            else None
        )
        secrets = [secret for secret in (self.hf_token, self.secret_env) if secret]
        pods_need = [self.storage, self.rendezvous, self.guardrails, *secrets]
        template = with_secrets_digest(args.pod_template, secret_values(config))
        self.trainer = Trainer(f"{name}-{world.workload_name}", TrainerArgs(world=world, pod_template=template), opts=inside(*pods_need))

        context = config.kubernetes.context
        self.outputs: dict[str, Any] = {
            "namespace": world.namespace,
            "workloadKind": world.workload_kind,
            "workloadName": self.trainer.workload.metadata["name"],  # type: ignore[attr-defined]
            "masterAddress": world.master_addr,
            "rendezvousEndpoint": world.rdzv_endpoint,
            "nodes": world.nnodes if not world.elastic else world.nnodes_text,
            "procsPerNode": world.nproc_per_node,
            "worldSize": world.world_size if not world.elastic else world.world_size_text,
            "runName": world.run_name,
            "kubectlWatchPods": world.kubectl_watch_pods(context),
            "kubectlFollowRank0": world.kubectl_follow_rank0(context),
            "kubectlRunStatus": world.kubectl_run_status(context),
            "podSelector": world.label_selector,
            "statusCommand": world.status_command(context),
            "resultsCommand": world.results_command(context),
        }
        self.register_outputs(self.outputs)
