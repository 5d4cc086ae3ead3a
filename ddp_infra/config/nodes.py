"""`nodes`: the world's number of pods, one number or a range MIN:MAX (an elastic world).

The range is torchrun's own `--nnodes MIN:MAX`: the world forms once MIN pods have joined, takes
in up to MAX, and re-forms at whatever size in between the cluster gives it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from trainer import contract

MAX_NODES = 1024  # a StatefulSet this size is already far beyond what one rendezvous handles well


@dataclass(frozen=True)
class NodeRange:
    minimum: int
    maximum: int

    @property
    def elastic(self) -> bool:
        return self.minimum < self.maximum

    def __str__(self) -> str:
        """As `pulumi config set nodes` takes it, and torchrun's --nnodes: "4", or "2:4"."""
        return contract.range_text(self.minimum, self.maximum)


def _node_range(value: Any) -> NodeRange:
    if isinstance(value, NodeRange):
        return value
    text = str(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
    parsed = contract.parse_range(text)
    if parsed and parsed[1] <= MAX_NODES:
        return NodeRange(*parsed)
    raise PydanticCustomError("pattern", "{allowed}", {"allowed": _node_range.allowed})  # type: ignore[attr-defined]


_node_range.allowed = (  # type: ignore[attr-defined]  # shown in a problem's line and the config reference
    f"a number of pods from 1 to {MAX_NODES}, or a range MIN:MAX of them with MIN < MAX for an elastic world (e.g. 64 or 32:64)"
)

NodeCount = Annotated[NodeRange, BeforeValidator(_node_range)]
