"""Reading the stack's config: every key judged on its own, then the rules about several keys, and
one ConfigError listing every problem before any resource is registered.

Keys are camelCase, as `pulumi config set` writes them (`ddp-infra:nodes`,
`ddp-infra:storage.outputs.size` with `--path`). What the CLI stores is accepted as it is
stored: `pulumi config set nodes 64` stores the string "64", objects arrive as JSON. Checks that
involve several top-level keys run only on keys that are individually valid, so a bad key never
hides or garbles another key's problem.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Optional, get_args

import pulumi
from pulumi.runtime import config as runtime_config
from pydantic import BaseModel, TypeAdapter, ValidationError

from trainer import contract

from ..names import OUT_OF_SERVICE_TAINT, PROJECT
from .cross_key_rules import cross_key_problems
from .problems import NOT_SHOWN, ConfigError, Problem, full_key, shown
from .stack import StackConfig


def _problems_from(error: ValidationError, prefix: list[str | int]) -> list[Problem]:
    problems = []
    for detail in error.errors():
        path = prefix + list(detail["loc"])
        ctx = detail.get("ctx") or {}
        if "path" in ctx:  # a model validator speaking about one of its fields
            path += list(ctx["path"])
            given = shown(ctx.get("given"))
        elif detail["type"] == "missing":
            given = "(not set)"
        else:
            given = shown(detail["input"])
        allowed = (
            ctx.get("allowed")
            or _integer_range(path, detail["type"])
            or _section_keys(path, detail["type"])
            or re.sub(r"^(Input should be|Value error,)\s*", "", detail["msg"])
        )
        problems.append(Problem(full_key(path), given, allowed))
    return problems


# pydantic's errors for a value that is not an integer, or one out of the field's bounds.
_INTEGER_ERRORS = {"int_parsing", "int_type", "int_from_float", "greater_than_equal", "less_than_equal"}


def _integer_range(path: list[str | int], error_type: str) -> Optional[str]:
    """`an integer from 1 to 1024` for any error of a bounded integer key: the whole range at once,
    whether the value was not a number or out of bounds."""
    field = _field_at(path) if error_type in _INTEGER_ERRORS else None
    if field is None or field.annotation not in (int, Optional[int]):
        return None
    low = next((m.ge for m in field.metadata if hasattr(m, "ge")), None)
    high = next((m.le for m in field.metadata if hasattr(m, "le")), None)
    if low is None:
        return None
    return f"an integer from {low} to {high}" if high is not None else f"an integer from {low}"


def _section_keys(path: list[str | int], error_type: str) -> Optional[str]:
    """For a key its section does not have: the keys it has."""
    field = _field_at(path[:-1]) if error_type == "extra_forbidden" else None
    model = _model_of(field) if field is not None else None
    if model is None:
        return None
    return f"a key of {full_key(path[:-1])}: " + ", ".join(f.alias or name for name, f in model.model_fields.items())


def _model_of(field: Any) -> Any:
    """The model a field holds, where it holds one (Optional[Model] and list[Model] included)."""
    inner = [field.annotation, *get_args(field.annotation)]
    inner += [arg for candidate in list(inner) for arg in get_args(candidate)]  # Optional[list[Model]]
    return next((t for t in inner if isinstance(t, type) and issubclass(t, BaseModel)), None)


def _field_at(path: list[str | int]) -> Any:
    """The model field a config path names (list indices skipped), or None."""
    model: Any = StackConfig
    field = None
    for part in path:
        if isinstance(part, int):
            continue
        fields = {f.alias or name: f for name, f in getattr(model, "model_fields", {}).items()}
        field = fields.get(part)
        if field is None:
            return None
        model = _model_of(field)
    return field


_HF_TOKEN_KEY = StackConfig.model_fields["hf_token"].alias
_SECRET_ENV_KEY = StackConfig.model_fields["secret_env"].alias
# One validator per top-level key, so that each key is judged on its own (then cross_key_rules.py).
_FIELD_ADAPTERS = {
    field.alias: TypeAdapter(Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation)
    for field in StackConfig.model_fields.values()
    if field.alias != _HF_TOKEN_KEY
}

# Every key a stack may set, in the model's order (hfToken too, which is read apart as a secret).
_ALL_KEYS = tuple(field.alias for field in StackConfig.model_fields.values())


def _decode(raw: str) -> Any:
    """Objects and arrays arrive as JSON; scalars as the string the CLI stored."""
    return json.loads(raw) if raw.lstrip()[:1] in ("{", "[") else raw


def parse(raw: dict[str, Any], hf_token: Optional[pulumi.Output] = None) -> StackConfig:
    """Validate decoded config values (keys as in the stack file, without the project prefix)."""
    problems: list[Problem] = []
    unknown = sorted(set(raw) - set(_FIELD_ADAPTERS))
    for key in unknown:
        problems.append(Problem(full_key([key]), shown(raw[key]), f"a known key: {', '.join(_ALL_KEYS)}"))
    valid: dict[str, Any] = {}
    for key, adapter in _FIELD_ADAPTERS.items():
        field = StackConfig.model_fields[_to_field_name(key)]
        if key not in raw:
            if field.is_required():
                problems.append(Problem(full_key([key]), "(not set)", f"a value: {field.description}"))
            else:
                valid[key] = field.get_default(call_default_factory=True)
            continue
        try:
            valid[key] = adapter.validate_python(raw[key])
        except ValidationError as error:
            problems.extend(_problems_from(error, [key]))
    problems.extend(cross_key_problems(valid))
    if problems:
        raise ConfigError(problems)
    return StackConfig.model_validate({**valid, _HF_TOKEN_KEY: hf_token})


def _to_field_name(alias: str) -> str:
    return next(name for name, field in StackConfig.model_fields.items() if field.alias == alias)


def load(config: Optional[pulumi.Config] = None) -> StackConfig:
    """Read and validate the stack's config; raise one ConfigError listing every problem."""
    config = config or pulumi.Config(PROJECT)
    raw: dict[str, Any] = {}
    problems: list[Problem] = []
    unknown = sorted(_stored_keys() - set(_FIELD_ADAPTERS) - {_HF_TOKEN_KEY})
    for key in [*_FIELD_ADAPTERS, *unknown]:
        if key == _SECRET_ENV_KEY:
            continue  # read apart: its values stay secret
        stored = config.get(key)
        if stored is None:
            continue
        if key in unknown and pulumi.runtime.is_config_secret(config.full_key(key)):
            stored = NOT_SHOWN  # an unknown key is reported with its value, and this one is a secret
        try:
            raw[key] = _decode(stored)
        except json.JSONDecodeError as error:
            problems.append(Problem(full_key([key]), shown(stored), f"valid JSON ({error.msg})"))
    hf_token = _read_hf_token(config, problems)
    secret_env = _read_secret_env(config, problems)
    if secret_env is not None:
        raw[_SECRET_ENV_KEY] = secret_env
    try:
        parsed = parse(raw, hf_token)
    except ConfigError as error:
        raise ConfigError(problems + error.problems) from None
    if problems:
        raise ConfigError(problems)
    _warn_about_single_node_claims(parsed)
    _warn_about_a_statefulset_on_a_lost_node(parsed)
    return parsed


def _warn_about_single_node_claims(config: StackConfig) -> None:
    """ReadWriteOnce binds every pod of a claim to one node: fine on a one-node dev cluster,
    a scheduling dead end for a multi-node GPU world. A warning, not an error, for that reason."""
    if config.nodes.maximum == 1:
        return
    for role, volume in config.storage.volumes().items():
        if volume.create and volume.access_mode == "ReadWriteOnce":
            pulumi.log.warn(
                f"{full_key(['storage', role, 'accessMode'])} is ReadWriteOnce with nodes={config.nodes}: "
                "all pods must then share one Kubernetes node; use ReadWriteMany on a multi-node cluster"
            )


def _warn_about_a_statefulset_on_a_lost_node(config: StackConfig) -> None:
    """A StatefulSet starts no second pod of an ordinal while the first is not known to be gone, and
    a pod on a lost node is never known to be gone while its Node object stays: the world waits for
    it until an operator steps in. The other kinds replace it (docs/architecture.md#a-lost-node)."""
    if config.workload.kind != contract.STATEFULSET or config.nodes.maximum == 1:
        return
    pulumi.log.warn(
        f"{full_key(['workload', 'kind'])} is {contract.STATEFULSET} with nodes={config.nodes}: a pod on a lost node is "
        "never replaced while its Node object stays, and the world waits for it; use job or jobset (with workload.sparePods), "
        f"or taint such a node {OUT_OF_SERVICE_TAINT} or delete its Node object"
    )


def _stored_keys() -> set[str]:
    """The project's keys the engine passed, so a typo (`node` for `nodes`) is reported.

    The SDK has no public listing: this reads the map `set_all_config` fills.
    """
    stored = set(runtime_config.CONFIG.get()) | set(runtime_config.get_config_env())
    prefix = f"{PROJECT}:"
    return {key[len(prefix):] for key in stored if key.startswith(prefix)}


def _read_hf_token(config: pulumi.Config, problems: list[Problem]) -> Optional[pulumi.Output]:
    """The token as a secret Output, or None; a token stored in plain text is refused."""
    config_key = config.full_key(_HF_TOKEN_KEY)
    stored = config.get_secret(_HF_TOKEN_KEY)
    # Pulumi.yaml declares an empty default so that stacks without a token stay valid.
    is_empty = config.get(_HF_TOKEN_KEY) in (None, "")
    if is_empty:
        return None
    if not pulumi.runtime.is_config_secret(config_key):
        problems.append(Problem(
            config_key, "(a value stored in plain text, not shown)",
            "a secret: `pulumi config set --secret hfToken <token>`",
        ))
        return None
    return stored


def _read_secret_env(config: pulumi.Config, problems: list[Problem]) -> Optional[dict[str, pulumi.Output]]:
    """Each value as a secret Output, by its name; None when the key is unset or unreadable.

    `pulumi config set --secret --path 'secretEnv.NAME'` stores an object whose leaves are
    encrypted; the engine hands the object over decrypted, as JSON, and marks the whole key
    secret. The names are no secret, so the JSON is read raw (`get_secret` would hide the names
    as well); only the values are wrapped. Which leaves were encrypted is not passed on: a key
    with no encrypted leaf at all is refused, one plain leaf beside encrypted ones cannot be told.
    """
    config_key = config.full_key(_SECRET_ENV_KEY)
    stored = runtime_config.get_config(config_key)
    if stored in (None, ""):
        return None
    try:
        decoded = json.loads(stored)
    except json.JSONDecodeError as error:
        problems.append(Problem(config_key, NOT_SHOWN, f"valid JSON ({error.msg})"))
        return None
    how = f"`pulumi config set --secret --path '{_SECRET_ENV_KEY}.NAME' <value>`"
    if not isinstance(decoded, dict):
        problems.append(Problem(config_key, NOT_SHOWN, f"an object of env var names to secrets: {how}"))
        return None
    if decoded and not pulumi.runtime.is_config_secret(config_key):
        problems.append(Problem(config_key, "(values stored in plain text, not shown)", f"secrets: {how}"))
        return None
    values: dict[str, pulumi.Output] = {}
    for name, value in decoded.items():
        if isinstance(value, str):
            values[name] = pulumi.Output.secret(value)
        else:  # an encrypted leaf is always a string
            problems.append(Problem(full_key([_SECRET_ENV_KEY, name]), NOT_SHOWN, f"a secret string: {how}"))
    return values
