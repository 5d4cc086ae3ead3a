"""A training world: the component a Pulumi program adds, every part of one wired in dependency order.

`DdpTrainingWorld(name, DdpTrainingWorldArgs(config=..., image=...), opts)` is the package's public
component. Its arguments are the stack config's settings (docs/configuration.md), validated by the
same rules, and what other resources of the program hand in: the image (an Output is welcome:
ddp_infra.stand_ins) and the Kubernetes provider (`opts.provider` or `opts.providers`; the world
makes none when one is given). Before anything is registered it checks its config and the cluster
(access, fit, the APIs it needs). Its children are named after it (`<world>-storage`,
`<world>-trainer`, ...), so two worlds live side by side in one program and one state. Its type is
the package's own token; the layout before 0.2.0 (type `ddp-infra:training:Stack`, children named
by role alone) is taken over through aliases where `previous_layout` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

import pulumi
from pydantic import TypeAdapter, ValidationError

from .. import config as stack_config
from .. import gang
from ..gang import ADMISSION_PREFIX
from ..access import require_access
from ..claim_changes import CLAIMS_OUTPUT, recorded_claims, refuse_claim_changes
from ..cluster_apis import require_cluster_apis
from ..config import ConfigError, Problem, StackConfig
from ..config.problems import shown
from ..config.scalars import DnsSubdomain, ImageReference, LabelValue
from ..config.scheduling import NodeLabelKey
from ..fit import require_world_fits
from ..pod import pod_template
from ..pod_security import pod_security_level
from ..providers import Providers
from ..reachability import require_reachable_cluster
from ..secrets_digest import secret_values, with_secrets_digest
from ..stand_ins import NAME, stand_in, swapped
from ..world import World
from ..world_wait import WORLD_STATE_OUTPUT, world_state
from .base import Component, FormerName
from .guardrails import Guardrails, GuardrailsArgs
from .hf_token import HfTokenSecret, HfTokenSecretArgs
from .namespace import TrainingNamespace, TrainingNamespaceArgs
from .rendezvous import Rendezvous, RendezvousArgs
from .rendezvous_store import RendezvousStore, RendezvousStoreArgs
from .secret_env import SecretEnv, SecretEnvArgs
from .storage import TrainingStorage, TrainingStorageArgs
from .trainer import Trainer, TrainerArgs

# The world's Pulumi type, and the one it had before 0.2.0.
WORLD_TYPE = "ddp-infra:index:DdpTrainingWorld"
LAYOUT_0_1_TYPE = "ddp-infra:training:Stack"
ARGS = "DdpTrainingWorldArgs"  # how a problem of an argument names it
REFUSED = f"arguments of {WORLD_TYPE}"  # what a ConfigError of the arguments says was invalid


@dataclass(frozen=True)
class DdpTrainingWorldArgs:
    """What a world is made of."""

    # The stack config's settings (docs/configuration.md): a mapping keyed as a stack file is, without
    # the `ddp-infra:` prefix (`{"nodes": 4, "image": {"name": ...}}`), or a parsed StackConfig.
    config: Union[StackConfig, Mapping[str, Any]]
    # The trainer image, where another resource makes it (an Output): it takes the place of `image.name`.
    image: Optional[pulumi.Input[str]] = None
    # The StorageClass of every claim the world creates, where another resource makes it (the
    # program's EFS or Filestore class): it takes the place of each `storage.<role>.storageClass`.
    storage_class: Optional[pulumi.Input[str]] = None
    # Node labels the pods must match, a value where another resource makes it (a node pool's label):
    # added to `scheduling.nodeSelector`. The fit check cannot count nodes for a value known after `up`.
    node_selector: Optional[Mapping[str, pulumi.Input[str]]] = None
    # The Hugging Face token and the `secretEnv` values (config's `hfToken`, `secretEnv`): plain
    # strings or Outputs, each made a Pulumi secret here whatever it was handed in as.
    hf_token: Optional[pulumi.Input[str]] = None
    secret_env: Optional[Mapping[str, pulumi.Input[str]]] = None
    # With a provider of the caller's: the one for the claims and the namespace, which Pulumi keeps on
    # delete. One with server-side apply adopts them after `pulumi destroy`; without it the caller's
    # provider registers them, and an `up` after a `destroy` fails on the claims left in the cluster.
    retained_provider: Optional[pulumi.ProviderResource] = None
    # Where the program exports the world's outputs (DdpTrainingWorld.export): `<name>.` unless set.
    # The next run reads the claims and the world's state back from there.
    outputs_prefix: Optional[str] = None
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
    """One DDP training world on Kubernetes: its namespace, claims, secrets, rendezvous, guardrails and
    workload. Its outputs (`outputs`, keyed as the stack outputs are) are registered as the component's."""

    def __init__(self, name: str, args: DdpTrainingWorldArgs, opts: Optional[pulumi.ResourceOptions] = None):
        config = config_of(args)
        world, template = checked_world(config)
        self.former_name = layout_0_1_name(name, world) if args.previous_layout else None
        providers = Providers.of_caller(opts, args.retained_provider)
        if providers is None:
            providers = Providers.of(config, name, self.former_name)
            opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(providers=[providers.default]))
        if args.previous_layout:
            opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(aliases=[pulumi.Alias(type_=LAYOUT_0_1_TYPE)]))
        last = last_deployment(name, args.previous_layout)
        super().__init__("World", name, opts, type_=WORLD_TYPE)
        self.outputs_prefix = f"{name}." if args.outputs_prefix is None else args.outputs_prefix
        claims_output, state_output = f"{self.outputs_prefix}{CLAIMS_OUTPUT}", f"{self.outputs_prefix}{WORLD_STATE_OUTPUT}"
        claim_changes_allowed = refuse_claim_changes(config.storage, world.namespace, last, claims_output)
        in_namespace: list[pulumi.Resource] = []
        if config.namespace.create:
            self.training_namespace: Optional[TrainingNamespace] = TrainingNamespace(
                f"{name}-namespace",
                TrainingNamespaceArgs(
                    namespace=config.namespace,
                    retain_on_delete=config.storage.namespace_retained,
                    protect=config.storage.namespace_protected,
                    pod_security=pod_security_level(template["spec"]),
                    retained_provider=providers.retained,
                ),
                opts=pulumi.ResourceOptions(
                    parent=self, providers=[providers.namespace] if providers.namespace else None, depends_on=self._waits_for
                ),
            )
            in_namespace.append(self.training_namespace)
        else:
            self.training_namespace = None

        def inside(*after: pulumi.Resource) -> pulumi.ResourceOptions:
            # what the program made the world depend on (a namespace, a quota, a queue) too
            return pulumi.ResourceOptions(parent=self, depends_on=[*self._waits_for, *in_namespace, *after])

        self.storage = TrainingStorage(
            f"{name}-storage",
            TrainingStorageArgs(
                storage=config.storage, namespace=world.namespace, retained_provider=providers.retained,
                changes_allowed=claim_changes_allowed,
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
        self.trainer = Trainer(
            f"{name}-{world.workload_name}",
            TrainerArgs(world=world, pod_template=with_secrets_digest(template, secret_values(config))),
            opts=inside(*pods_need),
        )

        context = config.kubernetes.context
        self.outputs: dict[str, Any] = swapped({
            "namespace": world.namespace,
            "workloadKind": world.workload_kind,
            "workloadName": self.trainer.workload.metadata["name"],  # type: ignore[attr-defined]
            "masterAddress": world.master_addr,
            "rendezvousEndpoint": world.rdzv_endpoint,
            "nodes": world.nnodes if not world.elastic else world.nnodes_text,
            "procsPerNode": world.nproc_per_node,
            "worldSize": world.world_size if not world.elastic else world.world_size_text,
            "admission": gang.admission(world),  # what the scheduler will do with the world, said at preview
            "runName": world.run_name,
            "kubectlWatchPods": world.kubectl_watch_pods(context),
            "kubectlFollowRank0": world.kubectl_follow_rank0(context),
            "kubectlRunStatus": world.kubectl_run_status(context),
            "podSelector": world.label_selector,
            "statusCommand": world.status_command(context),
            "resultsCommand": world.results_command(context),
            CLAIMS_OUTPUT: recorded_claims(config.storage, world.namespace),  # read back by the next run's refusal
            WORLD_STATE_OUTPUT: world_state(world, self.trainer.workload, last, self, state_output),
        })
        self.register_outputs(self.outputs)
        # said in the preview's diagnostics, and so in the pull request's comment (scripts/preview_diff.py)
        pulumi.log.info(f"{ADMISSION_PREFIX}{self.outputs['admission']}", self)

    def export(self) -> None:
        """Export every output of the world as a stack output, under `outputs_prefix`: the next run
        reads its claims and its state back from there."""
        for key, value in self.outputs.items():
            pulumi.export(f"{self.outputs_prefix}{key}", value)


def config_of(args: DdpTrainingWorldArgs) -> StackConfig:
    """The world's config: a mapping validated as a stack's config is (each problem named as the
    argument that holds it), with what is handed in apart put in its place; refused before anything
    is registered."""
    config = parsed_config(args)
    if args.storage_class is not None:
        name = stand_in(args.storage_class, checked(f"{ARGS}.storage_class", _DNS_SUBDOMAIN), NAME)
        volumes = {role: volume.model_copy(update={"storage_class": name}) for role, volume in config.storage.volumes().items()}
        config = config.model_copy(update={"storage": config.storage.model_copy(update=volumes)})
    if args.node_selector is not None:
        selector = {}
        for key, value in args.node_selector.items():
            argument = f'{ARGS}.node_selector["{key}"]'
            selector[checked(f"{argument} (its key)", _LABEL_KEY)(key)] = stand_in(value, checked(argument, _LABEL_VALUE), NAME)
        scheduling = config.scheduling
        config = config.model_copy(update={"scheduling": scheduling.model_copy(update={"node_selector": {**scheduling.node_selector, **selector}})})
    return config


def parsed_config(args: DdpTrainingWorldArgs) -> StackConfig:
    """`args.config` parsed, with the image and the secrets handed in apart in their places."""
    handed: dict[str, Any] = {}
    if args.image is not None:
        handed["image"] = stand_in(args.image, checked(f"{ARGS}.image", _IMAGE_REFERENCE))
    if args.hf_token is not None:
        handed["hf_token"] = pulumi.Output.secret(args.hf_token)
    if args.secret_env is not None:
        handed["secret_env"] = {name: pulumi.Output.secret(value) for name, value in args.secret_env.items()}
    if isinstance(args.config, StackConfig):  # parsed already: only the image is put in its place
        config = args.config
        if {"hf_token", "secret_env"} & handed.keys():
            raise TypeError(f"{ARGS}.hf_token and .secret_env go with a config mapping; a StackConfig holds its own")
        return config if "image" not in handed else config.model_copy(update={"image": config.image.model_copy(update={"name": handed["image"]})})
    raw = dict(args.config)
    if "image" in handed:
        raw["image"] = {**raw.get("image", {}), "name": handed["image"]}
    if "secret_env" in handed:
        raw["secretEnv"] = handed["secret_env"]
    try:
        return stack_config.parse(raw, handed.get("hf_token"))
    except ConfigError as error:
        apart = {"secretEnv": f"{ARGS}.secret_env"} if "secret_env" in handed else {}
        raise error.of_argument(f"{ARGS}.config", REFUSED, apart) from None


_IMAGE_REFERENCE, _DNS_SUBDOMAIN = TypeAdapter(ImageReference), TypeAdapter(DnsSubdomain)
_LABEL_KEY, _LABEL_VALUE = TypeAdapter(NodeLabelKey), TypeAdapter(LabelValue)


def checked(argument: str, rule: TypeAdapter) -> Callable[[str], str]:
    """A check of a value handed in by the rule of the config key it takes the place of, its problem
    named as the argument."""

    def check(value: str) -> str:
        try:
            return rule.validate_python(value)
        except ValidationError as error:
            allowed = error.errors()[0]["msg"]
            raise ConfigError([Problem(argument, shown(value), allowed)], REFUSED) from None

    return check


def checked_world(config: StackConfig) -> tuple[World, dict[str, Any]]:
    """The world of a config and its pod template, once the cluster answers, serves the APIs the world
    needs, lets the caller make it and has room for it: refused before anything is registered."""
    require_reachable_cluster(config.kubernetes, pulumi.get_stack())
    workload_api = require_cluster_apis(config)
    world = World.from_config(config, pulumi.get_project(), pulumi.get_stack(), workload_api)
    template = pod_template(world)  # the one the fit check counts is the one the world runs
    require_access(world, template)
    require_world_fits(world, template)
    return world, template


def last_deployment(world_name: str, previous_layout: bool) -> pulumi.StackReference:
    """The stack itself, as its last deployment left it: the outputs the world reads back. Named
    `<world>-last-deployment`; a world of the layout before 0.2.0 keeps the name it had then
    (`<stack>-last-deployment`), since the engine takes no alias for a resource it reads: it would
    read the new one and discard the old."""
    stack = pulumi.get_stack()
    name = f"{stack}-last-deployment" if previous_layout else f"{world_name}-last-deployment"
    return pulumi.StackReference(name, stack_name=f"{pulumi.get_organization()}/{pulumi.get_project()}/{stack}")
