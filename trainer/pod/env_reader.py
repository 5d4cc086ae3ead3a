"""Reading a pod's env: every variable checked, every problem collected, so that one error lists all of them.

Pure: no I/O, no torch. Both env schemes (trainer/pod/env.py) read through an EnvReader.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Mapping

from trainer import contract as c

# The pod's own: the stack derives SHUTDOWN_TIMEOUT from the termination grace period, so without it
# torchrun's own default applies. The other fallbacks are the contract's (trainer/contract.py).
DEFAULT_SHUTDOWN_TIMEOUT = 30

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", re.IGNORECASE)
_ORDINAL_SUFFIX = re.compile(r"^(?P<base>.+)-(?P<ordinal>[0-9]+)$")


@dataclass(frozen=True)
class Problem:
    name: str
    value: str | None  # None: the variable is not set
    allowed: str

    def __str__(self) -> str:
        given = "not set" if self.value is None else f"got {self.value!r}"
        return f"{self.name}: {given}; expected {self.allowed}"


class WorldError(ValueError):
    """The pod's env cannot describe a torchrun world; `problems` lists every reason."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"the pod env does not describe a training world ({len(problems)} problem(s)):\n{lines}")


class EnvReader:
    """Reads and checks variables, recording each problem instead of stopping at the first."""

    def __init__(self, env: Mapping[str, str]):
        self.env = env
        self.problems: list[Problem] = []

    def text(self, name: str, required: bool = True) -> str | None:
        value = self.env.get(name)
        if value is None or value.strip() == "":
            if required:
                self.problem(name, value, "a non-empty value")
            return None
        return value.strip()

    def integer(self, name: str, minimum: int, required: bool = True, default: int | None = None) -> int | None:
        value = self.text(name, required=required)
        if value is None:
            return default
        try:
            number = int(value, 10)
        except ValueError:
            self.problem(name, value, f"a whole number >= {minimum}")
            return None
        if number < minimum:
            self.problem(name, value, f"a whole number >= {minimum}")
            return None
        return number

    def node_range(self, name: str) -> tuple[int, int | None] | None:
        """(MAX, MIN) of "N" (MIN None: exactly N) or of an elastic world's "MIN:MAX"."""
        value = self.text(name)
        if value is None:
            return None
        parsed = c.parse_range(value)
        if parsed:
            minimum, maximum = parsed
            return maximum, (minimum if minimum < maximum else None)
        self.problem(name, value, "a whole number >= 1, or MIN:MAX with 1 <= MIN < MAX (an elastic world)")
        return None

    def seconds(self, name: str, default: float) -> float:
        value = self.text(name, required=False)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not number > 0:
            self.problem(name, value, "a positive number of seconds")
            return default
        return number

    def port(self, name: str, required: bool = True) -> int | None:
        value = self.integer(name, minimum=1, required=required)
        if value is not None and value > 65535:
            self.problem(name, str(value), "a TCP port, 1..65535")
            return None
        return value

    def host(self, name: str, value: str | None) -> str | None:
        if value is None:
            return None
        if not is_valid_host(value):
            self.problem(name, value, "a DNS name (RFC 1123 labels) or an IP address")
            return None
        return value

    def choice(self, name: str, allowed: tuple[str, ...], required: bool = True) -> str | None:
        value = self.text(name, required=required)
        if value is not None and value not in allowed:
            self.problem(name, value, f"one of {', '.join(allowed)}")
            return None
        return value

    def problem(self, name: str, value: str | None, allowed: str) -> None:
        # the first problem of a variable is the one to fix; later checks of it would repeat it
        if all(p.name != name for p in self.problems):
            self.problems.append(Problem(name, value, allowed))


def is_valid_host(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        pass
    labels = value.rstrip(".").split(".")
    return len(value) <= 253 and all(_DNS_LABEL.match(label) and len(label) <= 63 for label in labels)


def ordinal_of(name: str | None) -> tuple[str, int] | None:
    """`train-llm-3` -> ("train-llm", 3): the StatefulSet / Indexed Job pod-name convention."""
    if not name:
        return None
    match = _ORDINAL_SUFFIX.match(name)
    return (match["base"], int(match["ordinal"])) if match else None


def parse_endpoint(value: str) -> tuple[str, int] | None:
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")  # [::1]:29500
    if not sep or not port.isdigit() or not 0 < int(port) <= 65535 or not is_valid_host(host):
        return None
    return host, int(port)
