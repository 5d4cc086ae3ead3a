"""The constrained scalars the config is made of, and the base of every section's model.

Each scalar says what it allows in words (`pattern`'s `allowed`), which both a problem's line and
the config reference in the README quote.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any, Callable

import pulumi
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, InstanceOf, WithJsonSchema
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


_QUANTITY_RE = r"[+]?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?\d+)?"
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


Quantity = Annotated[str, AfterValidator(quantity("a Kubernetes quantity such as 500m, 4, 8Gi or 100G"))]
# Memory and storage: the API server calls a fraction of a byte ("500m", "1.5") invalid.
Bytes = Annotated[
    str, AfterValidator(quantity("whole bytes as a Kubernetes quantity, such as 8Gi, 1.5Gi or 100G; no fraction of a byte like 500m", whole=True))
]
StorageSize = Annotated[
    str, AfterValidator(quantity("whole bytes above 0 as a Kubernetes quantity, such as 100Gi or 1.5Ti", whole=True, positive=True))
]
# An extended resource (a device) is counted in whole units: the API server refuses 500m of one.
Count = Annotated[str, AfterValidator(quantity("a whole number such as 1, 8 or 1k; a device is not divisible", whole=True))]

DnsLabel = Annotated[
    str,
    AfterValidator(
        pattern(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", "a DNS-1123 label: lowercase a-z, 0-9, '-', at most 63")
    ),
]
DnsSubdomain = Annotated[
    str,
    Field(max_length=253),
    AfterValidator(
        pattern(
            r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
            "a DNS-1123 subdomain: lowercase a-z, 0-9, '-', '.'",
        )
    ),
]
# StatefulSet pods are named <name>-<ordinal> and get a controller-revision-hash label
# <name>-<10 chars>, which must stay a 63-character label value: hence 52.
WorkloadName = Annotated[
    str,
    AfterValidator(
        pattern(r"[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?", "a DNS-1123 label of at most 52 characters")
    ),
]
LabelKey = Annotated[
    str,
    AfterValidator(
        pattern(
            r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?",
            "a label key: optional DNS prefix and '/', then at most 63 of A-Z a-z 0-9 - _ .",
        )
    ),
]
LabelValue = Annotated[
    str,
    AfterValidator(
        pattern(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?", "at most 63 of A-Z a-z 0-9 - _ .")
    ),
]
EnvName = Annotated[
    str, AfterValidator(pattern(r"[A-Za-z_][A-Za-z0-9_]*", "an env var name: letters, digits, '_'"))
]
Duration = Annotated[
    str, AfterValidator(pattern(r"[1-9]\d*(s|m|h)", "a Pulumi duration such as 600s, 30m or 2h"))
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
