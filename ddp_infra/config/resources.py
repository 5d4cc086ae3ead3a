"""`resources`: the trainer container's requests and limits (GPUs come from `gpusPerNode`)."""

from __future__ import annotations

from typing import Annotated, Optional

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from ..names import GPU_RESOURCE
from .scalars import Bytes, Count, ExtendedResourceName, Model, Quantity, field_problem, parse_quantity


class ResourceAmounts(Model):
    cpu: Optional[Quantity] = Field(None, description="CPU, e.g. 4 or 500m.")
    memory: Optional[Bytes] = Field(None, description="Memory, e.g. 16Gi.")


def _no_gpu_in_extended(extended: dict[str, str]) -> dict[str, str]:
    if GPU_RESOURCE in extended:
        raise PydanticCustomError("gpu", "{allowed}", {"allowed": f"resources without {GPU_RESOURCE}: set gpusPerNode"})
    return extended


class ResourcesConfig(Model):
    requests: ResourceAmounts = Field(
        ResourceAmounts(cpu="1", memory="4Gi"),
        description="Container requests (GPUs come from gpusPerNode). The CPU, or limits.cpu where set, shared among the "
        "pod's training processes, is the threads each computes on (OMP_NUM_THREADS, at least 1; the stack's env may set it).",
    )
    limits: ResourceAmounts = Field(
        ResourceAmounts(memory="8Gi"), description="Container limits (GPUs come from gpusPerNode)."
    )
    extended: Annotated[dict[ExtendedResourceName, Count], AfterValidator(_no_gpu_in_extended)] = Field(
        {}, description="Extended resources set as both request and limit, e.g. example.com/fpga: 1 (RDMA: network.rdmaResources)."
    )

    @model_validator(mode="after")
    def _requests_within_limits(self) -> "ResourcesConfig":
        for name in ("cpu", "memory"):
            request, limit = getattr(self.requests, name), getattr(self.limits, name)
            if request and limit and parse_quantity(request) > parse_quantity(limit):
                raise field_problem(("requests", name), f"at most limits.{name} ({limit})", request)
        return self
