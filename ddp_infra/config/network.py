"""`network` and `rendezvous`: how the world's processes find and reach each other."""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, Field, model_validator
from pydantic.alias_generators import to_camel

from trainer import contract

from ..names import DEFAULT_RDMA_RESOURCE, SECONDARY_NETWORKS_ANNOTATION
from .scalars import ExtendedResourceName, Model, field_problem, pattern


SecondaryNetwork = Annotated[
    str,
    AfterValidator(
        pattern(
            r"([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?(@[A-Za-z0-9_.-]{1,15})?",
            "a NetworkAttachmentDefinition: [namespace/]name[@interface], e.g. ib-rail-0 or infra/ib-rail-0@net1",
        )
    ),
]
IbHca = Annotated[
    str,
    AfterValidator(
        pattern(
            r"[\^=]?[A-Za-z0-9_]+(:[0-9]+)?(,[A-Za-z0-9_]+(:[0-9]+)?)*",
            "NCCL's HCA list: names or prefixes with optional :port, '^' to exclude, '=' for exact names, e.g. mlx5 or =mlx5_0:1,mlx5_1:1",
        )
    ),
]


class NetworkConfig(Model):
    socket_ifname: Optional[Annotated[str, AfterValidator(pattern(r"[\^=]?[A-Za-z0-9_.:-]+(,[A-Za-z0-9_.:-]+)*", "an interface name or NCCL list such as eth0, ^lo,docker0"))]] = Field(
        None, description="NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME (unset: the trainer's preflight picks one)."
    )
    infiniband: bool = Field(
        False,
        description="Use InfiniBand/RDMA: request rdmaResources, set NCCL_IB_DISABLE=0, and fail the preflight "
        "without /dev/infiniband (false: NCCL_IB_DISABLE=1, sockets).",
    )
    rdma_resources: dict[ExtendedResourceName, Annotated[int, Field(ge=1, le=64)]] = Field(
        {DEFAULT_RDMA_RESOURCE: 1},
        description="infiniband: the RDMA device plugin's resources per pod, as request and limit "
        "(the name differs by plugin: rdma/hca_shared_devices_a, rdma/rdma_shared_device_a, nvidia.com/...).",
    )
    secondary_networks: tuple[SecondaryNetwork, ...] = Field(
        (), description=f"Multus networks to attach to each pod (the {SECONDARY_NETWORKS_ANNOTATION} annotation)."
    )
    ib_hca: Optional[IbHca] = Field(None, description="infiniband: NCCL_IB_HCA, the HCAs NCCL uses (unset: all).")
    ib_gid_index: Optional[int] = Field(
        None, ge=0, le=255, description="infiniband: NCCL_IB_GID_INDEX (RoCE; unset: NCCL's default)."
    )
    nccl_debug: Literal["VERSION", "WARN", "INFO", "TRACE"] = Field("WARN", description="NCCL_DEBUG level.")
    async_error_handling: bool = Field(
        True, description="TORCH_NCCL_ASYNC_ERROR_HANDLING: a failed collective aborts instead of hanging."
    )

    @model_validator(mode="after")
    def _infiniband_settings_need_infiniband(self) -> "NetworkConfig":
        if self.infiniband and not self.rdma_resources:
            raise field_problem(
                ("rdmaResources",), f"at least one RDMA device resource when infiniband is true, e.g. {DEFAULT_RDMA_RESOURCE}: 1",
                {},
            )
        if not self.infiniband:
            for field in ("ib_hca", "ib_gid_index"):
                if getattr(self, field) is not None:
                    raise field_problem(
                        (to_camel(field),), "unset when infiniband is false (NCCL_IB_DISABLE=1 ignores it)", getattr(self, field)
                    )
        return self


class RendezvousConfig(Model):
    port: int = Field(29500, ge=1024, le=65535, description="Rendezvous / TCPStore port on pod 0.")
    backend: Literal[contract.RDZV_BACKENDS] = Field("c10d", description="torchrun rendezvous backend.")  # type: ignore[valid-type]
    endpoint: Optional[Annotated[str, AfterValidator(pattern(r"[A-Za-z0-9.-]+:[0-9]{1,5}", "host:port"))]] = Field(
        None, description="host:port of an etcd for etcd-v2 (c10d uses `store`, static pod 0)."
    )
    store: Literal["own-pod", "pod-0"] = Field(
        "own-pod",
        description="Where the c10d store runs. own-pod: a Deployment of one small pod (<workload>-rdzv-store, its Service "
        "and a NetworkPolicy admitting only the world's pods), so losing any training pod, pod 0 included, leaves the "
        "rendezvous standing and its replacement joins it. pod-0: on pod 0's torchrun, no extra pod; losing pod 0 breaks "
        "up the world until its replacement is back.",
    )  # fmt: skip
    join_timeout_seconds: int = Field(contract.STACK_JOIN_TIMEOUT_SECONDS, ge=30, le=86400, description="Seconds to wait for the whole world.")
    read_timeout_seconds: int = Field(contract.READ_TIMEOUT_SECONDS, ge=10, le=3600, description="c10d store read timeout.")
    last_call_timeout_seconds: int = Field(contract.LAST_CALL_TIMEOUT_SECONDS, ge=1, le=3600, description="Wait for late joiners.")
    close_timeout_seconds: int = Field(contract.CLOSE_TIMEOUT_SECONDS, ge=1, le=3600, description="Wait for the rendezvous to close.")
    keep_alive_interval_seconds: int = Field(
        contract.KEEP_ALIVE_INTERVAL_SECONDS, ge=1, le=60,
        description="Seconds between a pod's rendezvous heartbeats (RDZV_KEEP_ALIVE_INTERVAL). A lost pod counts as gone after "
        "keepAliveMaxAttempts missed ones, and only then is its replacement let into the world (torchrun's defaults, 5 s and 3, "
        "make that 15 s). Each heartbeat writes the rendezvous state on the store: raise it for worlds of hundreds of pods.",
    )  # fmt: skip
    keep_alive_max_attempts: int = Field(
        contract.KEEP_ALIVE_MAX_ATTEMPTS, ge=contract.KEEP_ALIVE_MIN_ATTEMPTS, le=100,
        description="Heartbeats a pod may miss before the rendezvous counts it as gone and the world re-forms without it "
        "(RDZV_KEEP_ALIVE_MAX_ATTEMPTS, torchrun's keep_alive_max_attempt). torchrun's 3 drops live pods whose heartbeat comes "
        "late on a busy node; fewer lets a killed pod's spare or replacement in sooner.",
    )  # fmt: skip
    master_wait_timeout_seconds: int = Field(
        contract.MASTER_WAIT_TIMEOUT_SECONDS, ge=10, le=86400, description="Seconds the preflight waits for pod 0's DNS name and port."
    )
    max_restarts: int = Field(contract.WORLD_MAX_RESTARTS, ge=0, le=100, description="torchrun --max-restarts of the whole world.")

    @property
    def store_on_pod_0(self) -> bool:
        """The contract's store_on_pod_0: no world forms without pod 0 (backend static, or c10d with store pod-0)."""
        return contract.store_on_pod_0(self.backend, apart=self.store == "own-pod")

    @model_validator(mode="after")
    def _etcd_needs_an_endpoint(self) -> "RendezvousConfig":
        if self.backend == "etcd-v2" and self.endpoint is None:
            raise field_problem(("endpoint",), "host:port of an etcd with the v2 API when backend is etcd-v2", None)
        if self.backend != "etcd-v2" and self.endpoint is not None:
            raise field_problem(("endpoint",), "unset unless backend is etcd-v2 (c10d's store is set by `store`)", self.endpoint)
        if self.backend != "c10d" and "store" in self.model_fields_set:
            raise field_problem(("store",), f"unset unless backend is c10d ({self.backend} keeps its own store)", self.store)
        return self
