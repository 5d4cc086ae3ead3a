"""The torchrun world one pod is in (PodWorld): what either env scheme resolves to (trainer/pod/env.py).

Pure: no I/O, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer import contract as c

# Which env a world was read from, as `python -m trainer.diagnose` prints it.
STACK_SCHEME = "contract"  # the env this program gives its pods (trainer/pod/stack_env.py)
PLATFORM_SCHEME = "seed-000"  # a platform's injected variables, after seed guide 000 (trainer/pod/platform_env.py)


@dataclass(frozen=True)
class Timeouts:
    join: int
    read: int
    last_call: int
    close: int
    keep_alive: int
    keep_alive_max_attempts: int


@dataclass(frozen=True)
class PodWorld:
    node_rank: int
    nnodes: int  # the most pods: NNODES, or the MAX of an elastic world's MIN:MAX
    nproc_per_node: int
    world_size: int
    master_addr: str
    master_port: int
    rdzv_backend: str
    rdzv_id: str
    rdzv_endpoint: str
    timeouts: Timeouts
    max_restarts: int
    master_wait_timeout: float
    shutdown_timeout: int
    rank_source: str  # where node_rank came from, for the log
    scheme: str  # STACK_SCHEME or PLATFORM_SCHEME
    run_name: str | None  # the run directory the trainer will use (RUN_NAME), for the log and cross-checks
    min_nodes: int | None = None  # an elastic world's MIN; None: a world of exactly nnodes
    spare_pods: int = 0  # pods beyond nnodes that wait to take a lost pod's place (SPARE_PODS)
    liveness_port: int | None = None  # where the entrypoint answers the kubelet's liveness probe (LIVENESS_PORT)

    @property
    def nnodes_text(self) -> str:
        """torchrun's --nnodes: "4", or an elastic world's "2:4"."""
        return c.range_text(self.min_nodes or self.nnodes, self.nnodes)

    @property
    def world_size_text(self) -> str:
        """WORLD_SIZE as the pod env says it: "8", or an elastic world's "4:8"."""
        return c.range_text((self.min_nodes or self.nnodes) * self.nproc_per_node, self.world_size)

    @property
    def hosts_rendezvous(self) -> bool:
        """Node 0's agent hosts the store where it lives on pod 0 (store_on_pod_0): node 0 must not wait for itself."""
        return store_on_pod_0(self.rdzv_backend, self.rdzv_endpoint, self.master_addr, self.master_port) and self.node_rank == 0

    def elastic_rule(self) -> str | None:
        """What an elastic world does with its size, for the pod's log; None for a world of one size."""
        if self.min_nodes is None:
            return None
        return (f"[DDP] elastic world of {self.nnodes_text} pods: it trains once {self.min_nodes} have joined, takes in "
                f"up to {self.nnodes} and re-forms at any size between, resuming at the exact sample; with fewer than "
                f"{self.min_nodes} it waits up to {self.timeouts.join} s ({c.RDZV_JOIN_TIMEOUT.name}), then this pod fails")  # fmt: skip

    def spare_rule(self) -> str | None:
        """What the world's spare pods do, for the pod's log; None without spares."""
        if not self.spare_pods:
            return None
        return (f"[DDP] {self.nnodes} pods train and {self.spare_pods} wait as spares ({c.SPARE_PODS.name}): the first "
                f"{self.nnodes} to join form the world, whichever their index, and a lost pod's place goes to a waiting "
                "one at once; a spare waits for as long as the world trains")  # fmt: skip

    def summary(self) -> str:
        return (
            f"[DDP] pod_index={self.node_rank} nnodes={self.nnodes_text} nproc_per_node={self.nproc_per_node} "
            f"world_size={self.world_size_text} master={self.master_addr}:{self.master_port} "
            f"rdzv={self.rdzv_backend}@{self.rdzv_endpoint} rdzv_id={self.rdzv_id} "
            f"max_restarts={self.max_restarts} rank_from={self.rank_source} run={self.run_name}"
        )


def store_on_pod_0(backend: str | None, endpoint: str | None, master_addr: str | None, master_port: int | None) -> bool:
    """The contract's store_on_pod_0, where a store apart is an endpoint other than node 0's address."""
    return c.store_on_pod_0(backend, apart=endpoint != f"{master_addr}:{master_port}")
