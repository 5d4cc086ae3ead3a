"""The constrained scalars the config is made of, and the base of every section's model.

Each scalar says what it allows in words (`pattern`'s `allowed`), which both a problem's line and
the config reference in the README quote.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any, Callable

import pulumi
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, InstanceOf, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError


def rule(test: Callable[[str], Any], allowed: str) -> Callable[[str], str]:
    """A check of one string that says what it allows when `test` refuses the value."""

    def check(value: str) -> str:
        if not test(value):
            raise PydanticCustomError("pattern", "{allowed}", {"allowed": allowed})
        return value

    check.allowed = allowed  # type: ignore[attr-defined]  # shown in the config reference
    return check


def pattern(regex: str, allowed: str) -> Callable[[str], str]:
    return rule(re.compile(regex).fullmatch, allowed)


# [0-9], not \d: Python's \d (and Decimal) take any script's digits, Kubernetes ASCII ones only.
_QUANTITY_RE = r"[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?[0-9]+)?"
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": Decimal("0.001"), "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
# Kubernetes counts bytes, millicores and devices in int64 (Quantity.Value, MilliValue): an
# exponent far beyond that (1e2147483647) makes the API server time out instead of answering.
_QUANTITY_LIMIT = 2**63


def parse_quantity(quantity: str) -> Decimal:
    """A Kubernetes quantity ("500m", "8Gi", "1e3", "1E") as a number of base units."""
    match = re.fullmatch(_QUANTITY_RE, quantity)
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {quantity!r}")
    number, suffix = match.group(1), match.group(3) or ""
    if suffix in _BINARY:
        return Decimal(number) * _BINARY[suffix]
    if suffix in _DECIMAL:  # "E" is exa; "E3" and "e3" are exponents
        return Decimal(number) * _DECIMAL[suffix]
    try:
        return Decimal(f"{number}E{suffix[1:]}")  # exact, whatever the exponent
    except ArithmeticError:
        raise ValueError(f"a Kubernetes quantity beyond any number: {quantity!r}") from None


def quantity(allowed: str, whole: bool = False, positive: bool = False) -> Callable[[str], str]:
    """A Kubernetes quantity below 2^63 base units; `whole`: no fraction of a unit (of a byte, of a
    device); `positive`: above 0."""

    def check(value: str) -> str:
        try:
            amount = parse_quantity(value)
        except ValueError:
            amount = None
        if amount is not None and amount >= _QUANTITY_LIMIT:
            raise PydanticCustomError("pattern", "{allowed}", {"allowed": f"{allowed}, below 2^63 (Kubernetes counts in int64)"})
        if amount is None or (whole and amount != amount.to_integral_value()) or (positive and amount <= 0):
            raise PydanticCustomError("pattern", "{allowed}", {"allowed": allowed})
        return value

    check.allowed = allowed  # type: ignore[attr-defined]  # shown in the config reference
    return check


def _number_as_text(value: object) -> object:
    """`cpu: 4` in a stack file arrives as a number; a manifest's quantity may be one too. (A boolean,
    as text, is then refused as no quantity.)"""
    return str(value) if isinstance(value, (int, float)) else value


Quantity = Annotated[str, BeforeValidator(_number_as_text), AfterValidator(quantity("a Kubernetes quantity such as 500m, 4, 8Gi or 100G"))]
# Memory and storage: the API server calls a fraction of a byte ("500m", "1.5") invalid.
Bytes = Annotated[
    str, BeforeValidator(_number_as_text), AfterValidator(quantity("whole bytes as a Kubernetes quantity, such as 8Gi, 1.5Gi or 100G; no fraction of a byte like 500m", whole=True))
]
StorageSize = Annotated[
    str, BeforeValidator(_number_as_text), AfterValidator(quantity("whole bytes above 0 as a Kubernetes quantity, such as 100Gi or 1.5Ti", whole=True, positive=True))
]
# An extended resource (a device) is counted in whole units: the API server refuses 500m of one.
Count = Annotated[str, BeforeValidator(_number_as_text), AfterValidator(quantity("a whole number such as 1, 8 or 1k; a device is not divisible", whole=True))]

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN_RE = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"  # of at most 253 characters, where it names an object
DnsLabel = Annotated[
    str,
    AfterValidator(
        pattern(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", "a DNS-1123 label: lowercase a-z, 0-9, '-', at most 63")
    ),
]
DnsSubdomain = Annotated[
    str,
    Field(max_length=253),
    AfterValidator(pattern(DNS_SUBDOMAIN_RE, "a DNS-1123 subdomain: lowercase a-z, 0-9, '-', '.'")),
]
# The workload's Service is <name>-rdzv, and a Service's name is a DNS-1035 label: it starts with
# a letter. StatefulSet pods are named <name>-<ordinal> and get a controller-revision-hash label
# <name>-<10 chars>, and the rendezvous store's pod a label <name>-rdzv-store, each of which must
# stay a 63-character label value: hence 52.
WorkloadName = Annotated[
    str,
    AfterValidator(
        pattern(
            r"[a-z]([-a-z0-9]{0,50}[a-z0-9])?",
            "a DNS-1035 label of at most 52 characters: lowercase a-z, 0-9, '-', starting with a letter",
        )
    ),
]
# A qualified name (label and annotation keys, node labels, resource names): an optional prefix,
# a DNS subdomain of at most 253 characters, and '/'; then a name of at most 63.
_PREFIX = rf"(?=[^/]{{1,253}}/){DNS_SUBDOMAIN_RE}/"
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LabelKey = Annotated[
    str,
    AfterValidator(
        pattern(
            rf"({_PREFIX})?{_NAME}",
            "a label key: an optional DNS prefix of at most 253 and '/', then at most 63 of A-Z a-z 0-9 - _ .",
        )
    ),
]
LabelValue = Annotated[
    str,
    AfterValidator(
        pattern(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?", "at most 63 of A-Z a-z 0-9 - _ .")
    ),
]
# What a device plugin advertises (IsExtendedResourceName): a prefix outside kubernetes.io, which
# the quota name requests.<prefix> keeps within 253 characters.
ExtendedResourceName = Annotated[
    str,
    AfterValidator(
        pattern(
            rf"(?!requests\.)(?!.*kubernetes\.io/)(?=[^/]{{1,244}}/){DNS_SUBDOMAIN_RE}/{_NAME}",
            "an extended resource: a DNS prefix outside kubernetes.io of at most 244 and '/', "
            "then at most 63 of A-Z a-z 0-9 - _ ., e.g. example.com/fpga",
        )
    ),
]

# An image reference as the kubelet parses it (distribution/reference's ParseNormalizedNamed): a
# repository path of lowercase components, an optional registry host[:port] before it, an optional
# tag and digest after it. Anything else leaves the pod in InvalidImageName.
_PATH_COMPONENT = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
_HOST_COMPONENT = r"([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_IMAGE_RE = re.compile(
    rf"(?P<registry>({_HOST_COMPONENT}(\.{_HOST_COMPONENT})*|\[[a-fA-F0-9:]+\])(:[0-9]+)?)"
    rf"/(?P<path>{_PATH_COMPONENT}(/{_PATH_COMPONENT})*)"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(@(sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128}))?"
)
IMAGE_REFERENCE = (
    "an image reference: [registry[:port]/]repository[:tag][@digest], the repository lowercase, "
    "e.g. ghcr.io/org/trainer:1.2 or trainer@sha256:<64 hex>"
)


def is_image_reference(image: str) -> bool:
    if re.fullmatch(r"[a-f0-9]{64}", image):  # an image ID, not a name
        return False
    first, slash, rest = image.partition("/")
    # The first component is a registry if it looks like a host; else the image is on Docker Hub.
    if slash and (first == "localhost" or any(c in first for c in ".:") or first.lower() != first):
        registry, remainder = first, rest
    else:
        registry, remainder = "docker.io", image
    if registry in ("docker.io", "index.docker.io") and "/" not in remainder:
        remainder = f"library/{remainder}"
    repository = remainder.split(":", 1)[0]
    if repository.lower() != repository:
        return False
    match = _IMAGE_RE.fullmatch(f"{registry}/{remainder}")
    return bool(match) and len(match["path"]) <= 255


ImageReference = Annotated[str, AfterValidator(rule(is_image_reference, IMAGE_REFERENCE))]
EnvName = Annotated[
    str, AfterValidator(pattern(r"[A-Za-z_][A-Za-z0-9_]*", "an env var name: letters, digits, '_'"))
]
# secretEnv's names are also the keys of its Secret, which the API server keeps within 253 characters.
SecretEnvName = Annotated[
    str,
    AfterValidator(
        pattern(r"[A-Za-z_][A-Za-z0-9_]{0,252}", "an env var name of at most 253 characters, its Secret's key: letters, digits, '_'")
    ),
]
Duration = Annotated[
    str, AfterValidator(pattern(r"[1-9][0-9]*(s|m|h)", "a Pulumi duration such as 600s, 30m or 2h"))
]
# A secret (the token, a secretEnv value) never enters the model as text: it is a secret Output.
SecretString = Annotated[
    InstanceOf[pulumi.Output],
    WithJsonSchema({"type": "string", "format": "secret"}),
]


class Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        arbitrary_types_allowed=True,
    )


def field_problem(path: tuple[str, ...], allowed: str, given: Any) -> PydanticCustomError:
    """An error a model validator raises about one of its fields, so the key can name that field."""
    return PydanticCustomError("invalid", "{allowed}", {"path": path, "allowed": allowed, "given": given})
