"""A problem of a stack's configuration, as one line that names the key, what it was given and
what is allowed; and the one error that carries them all."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

import pulumi

from ..names import PROJECT

NOT_SHOWN = "(a secret, not shown)"  # what a problem about a secret says it was given


@dataclass(frozen=True)
class Problem:
    key: str  # the full config key, e.g. ddp-infra:storage.outputs.size
    given: str
    allowed: str

    def __str__(self) -> str:
        return f"{self.key}: got {self.given}; allowed: {self.allowed}"


class ConfigError(pulumi.RunError):
    """Every problem of a stack's configuration, one line each.

    A RunError, so Pulumi reports the message alone, without a stack trace.
    """

    def __init__(self, problems: list[Problem], what: str = "stack configuration"):
        self.problems = problems
        lines = "\n".join(f"  {problem}" for problem in problems)
        super().__init__(f"invalid {what} ({len(problems)} problem(s)); nothing was created:\n{lines}")

    def of_argument(self, argument: str, what: str, apart: Mapping[str, str] = {}) -> "ConfigError":
        """The same problems, each key named as a program's argument holds it: `argument.<key>`, or for
        a key handed in as an argument of its own (`apart`: config key -> argument), that argument."""

        def named(key: str) -> str:
            key = key.removeprefix(f"{PROJECT}:")
            top = re.match(r"[^.\[]+", key)[0]  # type: ignore[index]
            return f"{apart[top]}{key[len(top):]}" if top in apart else f"{argument}.{key}"

        return ConfigError([Problem(named(p.key), p.given, p.allowed) for p in self.problems], what)


def full_key(path: list[str | int]) -> str:
    key = ""
    for part in path:
        if part == "[key]":  # pydantic's marker for a bad map key: the key itself is named
            continue
        if isinstance(part, int):
            key += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", str(part)):
            key += f".{part}" if key else str(part)
        else:  # a map key such as a label name, quoted as `pulumi config set --path` takes it
            key += f'["{part}"]'
    return f"{PROJECT}:{key}"


def shown(value: Any) -> str:
    if value is None:
        return "(not set)"
    text = json.dumps(value) if isinstance(value, (dict, list, tuple)) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
