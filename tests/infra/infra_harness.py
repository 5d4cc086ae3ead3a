"""Evaluate the Pulumi program under mocks and record what it registers.

The stack files are read here and fed through `set_all_config` exactly as the engine would
pass them (objects as JSON, scalars as stored), so the committed stack files are what is tested.
"""

from __future__ import annotations

import base64
import binascii
import copy
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import kubernetes_validate
import pulumi
from pulumi.runtime import mocks, rpc

from ddp_infra import config as stack_config
from ddp_infra import program
from ddp_infra.components.trainer import TYPES as WORKLOAD_TYPES
from ddp_infra.names import PROJECT
from demo.stack import committed_stack_config as stack_file_config

REPO = Path(__file__).resolve().parents[2]
STACKS = ("dev", "prod")
NODE_COUNTS = (1, 4, 64, 512)



def pod_template_of(manifest: dict[str, Any]) -> dict[str, Any]:
    """The pod template inside a registered workload of any kind."""
    if manifest["kind"] == "JobSet":
        (job,) = manifest["spec"]["replicatedJobs"]
        return job["template"]["spec"]["template"]
    return manifest["spec"]["template"]

@dataclass
class Registered:
    urn: str
    type: str
    name: str
    parent: str
    custom: bool
    provider: str
    inputs: dict[str, Any]
    protect: bool
    retain_on_delete: bool
    dependencies: list[str]
    custom_timeouts: dict[str, str]
    delete_before_replace: bool
    replace_on_changes: list[str]
    alias_types: list[str]  # the types of the aliases it registers: what it may have been before
    alias_names: list[str]  # and the names
    additional_secret_outputs: list[str]
    version: str  # of the provider plugin it asks for

    @property
    def manifest(self) -> dict[str, Any]:
        """The inputs with secrets unwrapped and whole numbers as ints, as the provider would apply them."""
        return unwrap_secrets(self.inputs)


class RecordingMonitor(mocks.MockMonitor):
    """The SDK's mock monitor, keeping each request's options (parent, protect, ...) too."""

    def __init__(self, mocks_: pulumi.runtime.Mocks):
        super().__init__(mocks_)
        self.registered: list[Registered] = []

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            timeouts = request.customTimeouts
            self.registered.append(Registered(
                urn=response.urn, type=request.type, name=request.name, parent=request.parent,
                custom=request.custom, provider=request.provider,
                inputs=rpc.deserialize_properties(request.object),
                protect=request.protect, retain_on_delete=request.retainOnDelete,
                dependencies=list(request.dependencies),
                custom_timeouts={k: getattr(timeouts, k) for k in ("create", "update", "delete") if getattr(timeouts, k)},
                delete_before_replace=request.deleteBeforeReplace, replace_on_changes=list(request.replaceOnChanges),
                alias_types=[alias.spec.type for alias in request.aliases if alias.spec.type],
                alias_names=[alias.spec.name for alias in request.aliases if alias.spec.name],
                additional_secret_outputs=list(request.additionalSecretOutputs), version=request.version,
            ))
        return response


class EchoMocks(pulumi.runtime.Mocks):
    """Each resource's outputs are its inputs, an object's metadata with a uid; a StackReference to
    the stack reads `previous_outputs`, the outputs of the stack's last deployment (none: a stack
    never deployed)."""

    def __init__(self, previous_outputs: Optional[dict[str, Any]] = None):
        self.previous_outputs = previous_outputs or {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        if args.typ == "pulumi:pulumi:StackReference":
            return f"{args.name}-id", {**args.inputs, "outputs": self.previous_outputs, "secretOutputNames": []}
        outputs = args.inputs
        if isinstance(outputs.get("metadata"), dict):
            outputs = {**outputs, "metadata": {**outputs["metadata"], "uid": f"{args.name}-uid"}}
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


@dataclass
class Evaluation:
    registered: list[Registered] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    secret_outputs: set[str] = field(default_factory=set)
    # a ConfigError, or the RunError of a check that stopped the program (e.g. a refused claim change)
    error: Optional[Exception] = None

    def of_type(self, type_: str) -> list[Registered]:
        return [r for r in self.registered if r.type == type_]

    def one(self, type_: str) -> Registered:
        found = self.of_type(type_)
        assert len(found) == 1, f"expected one {type_}, got {[r.name for r in found]}"
        return found[0]

    def named(self, type_: str, name: str) -> Registered:
        (found,) = [r for r in self.of_type(type_) if r.name == name]
        return found

    def provider(self, name: str = "ddp-k8s") -> Registered:
        """The explicit Kubernetes provider of that name (k8s: the stack's; k8s-retained: the retained
        objects'; k8s-namespace: a namespace's that is not retained, in render mode)."""
        (found,) = [r for r in self.of_type("pulumi:providers:kubernetes") if r.name == name]
        return found

    @property
    def kubernetes_manifests(self) -> list[dict[str, Any]]:
        """Every Kubernetes object the program registers, as the provider would send it."""
        return [r.manifest for r in self.registered if r.custom and r.type.startswith("kubernetes:")]

    @property
    def workload(self) -> Registered:
        workloads = [r for r in self.registered if r.type in WORKLOAD_TYPES.values()]
        assert len(workloads) == 1
        return workloads[0]

    @property
    def pod_template(self) -> dict[str, Any]:
        return pod_template_of(self.workload.manifest)

    @property
    def pod_spec(self) -> dict[str, Any]:
        return self.pod_template["spec"]

    @property
    def container(self) -> dict[str, Any]:
        (container,) = self.pod_spec["containers"]
        return container

    @property
    def env(self) -> dict[str, dict[str, Any]]:
        """The trainer's env by name, each variable as the pod spec holds it (`value` or `valueFrom`).
        A name set twice fails the test: Kubernetes would keep the later one without a word."""
        names = [var["name"] for var in self.container["env"]]
        assert len(names) == len(set(names)), f"duplicate env names: {names}"
        return {var["name"]: var for var in self.container["env"]}


def validate_manifest(manifest: dict[str, Any]) -> None:
    """Against Kubernetes' own schemas. kubernetes_validate has none for a JobSet (test_real_apiserver
    checks it against JobSet's CRD): its Job template is checked as the Job that JobSet makes of it."""
    if manifest["kind"] == "JobSet":
        (replicated,) = manifest["spec"]["replicatedJobs"]
        manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": manifest["metadata"]["name"]}, **replicated["template"]}
    kubernetes_validate.validate(manifest, "1.31", strict=True)


def with_path(values: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of values with `a.b.c` set, as `pulumi config set --path a.b.c` would."""
    result = copy.deepcopy(values)
    *parents, leaf = path.split(".")
    node = result
    for part in parents:
        node = node.setdefault(part, {})
    if value is DELETE:
        node.pop(leaf, None)
    else:
        node[leaf] = value
    return result


DELETE = object()


def stack_config_with(stack: str, **changes: Any) -> dict[str, Any]:
    """A committed stack file's config with `pulumi config set --path` changes, written as
    keyword arguments whose dots are double underscores: workload__kind="job"."""
    values = stack_file_config(stack)
    for path, value in changes.items():
        values = with_path(values, path.replace("__", "."), value)
    return values


def evaluated_with(stack: str, /, **changes: Any) -> Evaluation:
    """A committed stack file with `pulumi config set --path` changes (written as stack_config_with
    takes them), evaluated afresh; it must evaluate without an error."""
    evaluation = evaluate(stack_config_with(stack, **changes), stack=stack)
    assert evaluation.error is None, str(evaluation.error)
    return evaluation


def engine_config(values: dict[str, Any]) -> dict[str, str]:
    """What the engine hands the program: full keys, objects as JSON, scalars as strings."""
    return {
        f"{PROJECT}:{key}": json.dumps(value) if isinstance(value, (dict, list)) else str(value)
        for key, value in values.items()
    }


def evaluate(
    values: dict[str, Any], stack: str = "dev", secret_keys: tuple[str, ...] = (),
    previous_outputs: Optional[dict[str, Any]] = None, build: Callable[[Any], dict[str, Any]] = program.build,
) -> Evaluation:
    """Run load + build (what __main__.py does, or a program of the test's own) under fresh mocks;
    record everything. previous_outputs: the stack outputs of the last deployment (None: never deployed)."""
    mocks_ = EchoMocks(previous_outputs)
    monitor = RecordingMonitor(mocks_)
    pulumi.runtime.set_mocks(mocks_, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    pulumi.runtime.set_all_config(engine_config(values), [f"{PROJECT}:{key}" for key in secret_keys])
    evaluation = Evaluation()

    @pulumi.runtime.test
    def run():
        try:
            loaded = stack_config.load()
        except stack_config.ConfigError as error:
            evaluation.error = error
            return None
        outputs = build(loaded)

        async def resolve() -> None:
            for name, value in outputs.items():
                output = pulumi.Output.from_input(value)
                evaluation.outputs[name] = await output.future()
                if await output.is_secret():
                    evaluation.secret_outputs.add(name)

        return resolve()

    try:
        run()
    except pulumi.RunError as error:
        evaluation.error = error
    evaluation.registered = monitor.registered
    return evaluation


def unwrap_secrets(value: Any) -> Any:
    if rpc.is_rpc_secret(value):
        return unwrap_secrets(rpc.unwrap_rpc_secret(value))
    if isinstance(value, dict):
        return {k: unwrap_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap_secrets(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # protobuf carries every number as a double
    return value


def plain_strings(value: Any) -> list[str]:
    """Every string in value that is not inside a secret."""
    if rpc.is_rpc_secret(value):
        return []
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *plain_strings(v)]]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in plain_strings(v)]
    return [value] if isinstance(value, str) else []


def holds_in_plain_text(value: Any, secret: str) -> bool:
    """Whether `secret` can be read in `value` outside Pulumi secrets: inside any string, as
    written or base64-encoded (a Secret's `data`), or inside a string that decodes from base64."""
    encoded = {secret, base64.b64encode(secret.encode()).decode(), base64.urlsafe_b64encode(secret.encode()).decode()}
    for text in plain_strings(value):
        if any(form in text for form in encoded) or secret in _base64_decoded(text):
            return True
    return False


def _base64_decoded(text: str) -> str:
    """`text` decoded as standard or URL-safe base64; "" when it is neither."""
    for alphabet in (None, b"-_"):
        try:
            return base64.b64decode(text, altchars=alphabet, validate=True).decode(errors="replace")
        except (binascii.Error, ValueError):
            pass
    return ""


@functools.cache
def evaluated(stack: str, nodes: int, kind: str = "job") -> Evaluation:
    """A stack file at a given size and workload kind, evaluated once per test session."""
    values = with_path(stack_file_config(stack), "nodes", str(nodes))
    values = with_path(values, "workload.kind", kind)
    evaluation = evaluate(values, stack=stack)
    assert evaluation.error is None, str(evaluation.error)
    return evaluation
