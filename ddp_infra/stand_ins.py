"""Values a world is handed as another resource's output (an image that the same program builds).

Every object of a world is a plain manifest, built and checked by pure functions of plain values.
An argument that is a `pulumi.Output` enters them as a stand-in: a string that passes the same rule
as the value it stands for and that nothing else contains. Where an object is registered (and where
an output quotes the value), `swapped` puts the Output back in its place; the engine then shows the
field as known after `up` in a preview, and every other field as it is.
"""

from __future__ import annotations

import itertools
import re
from typing import Any, Callable

import pulumi

# What a stand-in looks like: the rule its value must pass, under a domain nothing has (RFC 2606's
# .invalid): an image reference no registry serves, or a DNS-1123 subdomain no object is named.
IMAGE = "stand-in.invalid/ddp-infra-{number}:output"
NAME = "ddp-infra-{number}.stand-in.invalid"
_STAND_IN = re.compile(r"stand-in\.invalid/ddp-infra-\d+:output|ddp-infra-\d+\.stand-in\.invalid")
_numbers = itertools.count()
_outputs: dict[str, pulumi.Output[str]] = {}


def stand_in(value: pulumi.Input[str], check: Callable[[str], str], template: str = IMAGE) -> str:
    """A plain value as it is (`check` raises on a bad one); an Output's stand-in (`template`), its value
    checked by `check` once known."""
    if isinstance(value, str):
        return check(value)
    token = template.format(number=next(_numbers))
    _outputs[token] = pulumi.Output.from_input(value).apply(check)
    return token


def holds_stand_in(value: Any) -> bool:
    """Whether `value` (a manifest's part) holds a value known only once another resource is made."""
    return bool(_STAND_IN.search(repr(value)))


def swapped(value: Any) -> Any:
    """`value` (a manifest, an output) with each stand-in put back as its Output."""
    if isinstance(value, str):
        parts = _STAND_IN.split(value)
        if len(parts) == 1:
            return value
        tokens = _STAND_IN.findall(value)
        pieces: list[pulumi.Input[str]] = [parts[0]]
        for token, after in zip(tokens, parts[1:]):
            pieces += [_outputs[token], after]
        return pulumi.Output.concat(*pieces) if value != tokens[0] else _outputs[tokens[0]]
    if isinstance(value, dict):
        return {key: swapped(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(swapped(item) for item in value)
    return value
