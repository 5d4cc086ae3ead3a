"""The one place the world's names, labels and shape are computed from the config.

Every spec and component receives the same `World`, which carries the config it was computed
from, so the Service's selector, the pods' labels, the StatefulSet's serviceName, MASTER_ADDR and
WORLD_SIZE are derived from one set of values and cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from trainer import contract

from .config import StackConfig, parse_quantity
from .names import APP_NAME, CONTAINER_NAME, OWNERSHIP_LABELS, WORKLOAD_API_BETA


@dataclass(frozen=True)
class World:
    """Names, labels and shape of one stack's training world, and the config they come from."""

    config: StackConfig
    project: str
    stack: str
    namespace: str
    workload_kind: str
    workload_name: str
    nnodes: int  # the most pods the world has: nodes, or an elastic world's MAX
    min_nodes: int  # the fewest it trains with: nnodes, or an elastic world's MIN
    spare_pods: int  # pods beyond nnodes, waiting to take a lost pod's place
    nproc_per_node: int
    rendezvous_port: int
    run_name: str
    has_hf_token: bool
    extra_labels: dict[str, str] = field(default_factory=dict)
    extra_annotations: dict[str, str] = field(default_factory=dict)
    # the Workload API version the cluster serves (ddp_infra/cluster_apis.py): the newest where not asked
    workload_api: str = WORKLOAD_API_BETA

    @classmethod
    def from_config(cls, config: StackConfig, project: str, stack: str, workload_api: Optional[str] = None) -> "World":
        return cls(
            config=config,
            project=project,
            stack=stack,
            namespace=config.namespace.name,
            workload_kind=config.workload.kind,
            workload_name=config.workload.name,
            nnodes=config.nodes.maximum,
            min_nodes=config.nodes.minimum,
            spare_pods=config.workload.spare_pods,
            nproc_per_node=config.nproc_per_node,
            rendezvous_port=config.rendezvous.port,
            run_name=config.run.name or config.workload.name,
            has_hf_token=config.hf_token is not None,
            extra_labels=dict(config.labels),
            extra_annotations=dict(config.annotations),
            workload_api=workload_api or WORKLOAD_API_BETA,
        )

    # --- shape ---------------------------------------------------------------------------------
    @property
    def elastic(self) -> bool:
        """The world trains at any size from min_nodes to nnodes pods (torchrun --nnodes MIN:MAX)."""
        return self.min_nodes < self.nnodes

    @property
    def pods(self) -> int:
        """The workload's pods: the world's most, and its spares."""
        return self.nnodes + self.spare_pods

    @property
    def forms_from_any_pods(self) -> bool:
        """Which pods train is decided as they join: an elastic world's, and one with spares. No
        pod is needed in every world, pod 0 included, and one pod's success is the run's."""
        return self.elastic or self.spare_pods > 0

    @property
    def world_size(self) -> int:
        """Training processes in the job (torch.distributed's meaning) at its largest: pods x processes per pod."""
        return self.nnodes * self.nproc_per_node

    @property
    def nnodes_text(self) -> str:
        """NNODES as the pods and torchrun read it: "4", or an elastic world's "2:4"."""
        return contract.range_text(self.min_nodes, self.nnodes)

    @property
    def world_size_text(self) -> str:
        """WORLD_SIZE as the pods read it: "8", or an elastic world's range of sizes, "4:8"."""
        return contract.range_text(self.min_nodes * self.nproc_per_node, self.world_size)

    @property
    def threads_per_process(self) -> Optional[int]:
        """The threads each training process computes on (OMP_NUM_THREADS): the pod's CPU, its limit
        or else its request, shared among its processes, at least 1; None where the pod names no CPU.
        Left to torch, every process takes every CPU of the node, and pods side by side on one node
        spin against each other's threads."""
        cpu = self.config.resources.limits.cpu or self.config.resources.requests.cpu
        if cpu is None:
            return None
        return max(1, int(parse_quantity(cpu)) // self.nproc_per_node)

    # --- names ---------------------------------------------------------------------------------
    @property
    def service_name(self) -> str:
        return f"{self.workload_name}-rdzv"

    @property
    def master_addr(self) -> str:
        return contract.master_dns_name(self.workload_name, self.service_name, self.workload_kind)

    @property
    def has_rendezvous_store(self) -> bool:
        """The stack runs the c10d store in a pod of its own (ddp_infra/rendezvous_store.py); etcd-v2's
        is the user's, and config.rendezvous.store_on_pod_0 says where no store pod is needed."""
        rendezvous = self.config.rendezvous
        return rendezvous.backend == "c10d" and rendezvous.store == "own-pod"

    @property
    def rendezvous_store_name(self) -> str:
        """The store's Deployment, Service and NetworkPolicy."""
        return f"{self.workload_name}-rdzv-store"

    @property
    def rdzv_endpoint(self) -> str:
        """host:port of the rendezvous store: etcd's, the store pod's Service, or pod 0's."""
        rendezvous = self.config.rendezvous
        if rendezvous.endpoint:
            return rendezvous.endpoint
        host = self.master_addr if rendezvous.store_on_pod_0 else self.rendezvous_store_name
        return f"{host}:{self.rendezvous_port}"

    @property
    def rdzv_id(self) -> str:
        """Unique to the stack and the world's shape: pods of a world of another size (or range of
        sizes) never join this one."""
        nodes = self.nnodes_text.replace(":", "-")
        return f"{self.project}-{self.stack}-{self.workload_name}-{nodes}x{self.nproc_per_node}"

    @property
    def service_account_name(self) -> str:
        return self.workload_name

    @property
    def hf_token_secret_name(self) -> Optional[str]:
        return f"{self.workload_name}-hf-token" if self.has_hf_token else None

    @property
    def env_secret_name(self) -> str:
        """The Secret of `secretEnv`'s values (the stack creates it only when there are some)."""
        return f"{self.workload_name}-env"

    @property
    def network_policy_name(self) -> str:
        return f"{self.workload_name}-world"

    @property
    def disruption_budget_name(self) -> str:
        return self.workload_name

    @property
    def pod_group_name(self) -> str:
        """Volcano's PodGroup of the world's pods (scheduling.gang.scheduler volcano)."""
        return self.workload_name

    # --- labels --------------------------------------------------------------------------------
    @property
    def selector(self) -> dict[str, str]:
        """The labels that pick the world's pods: Service, NetworkPolicy, PDB and workload agree on it."""
        return {"app.kubernetes.io/name": APP_NAME, "app.kubernetes.io/instance": self.workload_name}

    @property
    def rendezvous_store_selector(self) -> dict[str, str]:
        """The labels that pick the store's pod: not the world's, so that no Service, budget or
        policy of the world's pods counts it among them."""
        return {"app.kubernetes.io/name": APP_NAME, "app.kubernetes.io/instance": self.rendezvous_store_name}

    def labels(self, component: str, selector: Optional[dict[str, str]] = None) -> dict[str, str]:
        """Labels of an object of the world (and of its pods, with component="trainer"); `selector`
        in place of the world's for the objects of the store's pod."""
        return {
            **self.extra_labels,
            **(self.selector if selector is None else selector),
            "app.kubernetes.io/component": component,
            **OWNERSHIP_LABELS,
        }

    @staticmethod
    def storage_labels(role: str) -> dict[str, str]:
        """Labels of a claim: nothing about the workload, so no workload change touches a claim."""
        return {
            "app.kubernetes.io/name": f"{APP_NAME}-{role}",
            "app.kubernetes.io/component": "storage",
            **OWNERSHIP_LABELS,
        }

    # --- how to watch it -------------------------------------------------------------------------
    @property
    def label_selector(self) -> str:
        """`selector` as kubectl's -l takes it."""
        return ",".join(f"{key}={value}" for key, value in self.selector.items())

    def kubectl_watch_pods(self, context: Optional[str] = None) -> str:
        return f"{_kubectl(self.namespace, context)} get pods -l {self.label_selector} -o wide -w"

    def kubectl_run_status(self, context: Optional[str] = None) -> str:
        """Where the run stands: a Job's STATUS column reads Running, Complete or Failed (a JobSet's
        TERMINALSTATE Completed or Failed, RESTARTS the world's restarts)."""
        return f"{_kubectl(self.namespace, context)} get {self.workload_kind} {self.workload_name}"

    def kubectl_follow_rank0(self, context: Optional[str] = None) -> str:
        kubectl = _kubectl(self.namespace, context)
        if self.workload_kind in (contract.INDEXED_JOB, contract.JOBSET):
            # Job pods carry a random suffix: pick index 0 by its label.
            selector = f"{self.label_selector},{contract.JOB_COMPLETION_INDEX_ANNOTATION}=0"
            return f"{kubectl} logs -f -l {selector} -c {CONTAINER_NAME}"
        return f"{kubectl} logs -f {self.workload_name}-0 -c {CONTAINER_NAME}"

    def results_command(self, context: Optional[str] = None) -> str:
        """Copies the run's results from the outputs claim to ./results/<run> (observe/results.py; add
        --checkpoints for its checkpoints too), run from the project's directory."""
        image = self.config.image
        secrets = "".join(f" --pull-secret {name}" for name in image.pull_secrets)
        where = f" --context {context}" if context else ""
        return (f"{RESULTS_COPY} -n {self.namespace} --run {self.run_name} --claim {self.config.storage.outputs.claim_name} "
                f"--image {image.name}{secrets} -l {self.label_selector}{where}")  # fmt: skip

    def status_command(self, context: Optional[str] = None) -> str:
        """The status view (observe/status.py) of this world, run from the project's directory."""
        where = f" --context {context}" if context else ""
        return (f"{STATUS_VIEW} -n {self.namespace} --workload {self.workload_kind}/{self.workload_name} "
                f"-l {self.label_selector}{where}")  # fmt: skip


STATUS_VIEW = ".venv/bin/python -m observe.status"
RESULTS_COPY = ".venv/bin/python -m observe.results"


def _kubectl(namespace: str, context: Optional[str]) -> str:
    return f"kubectl --context {context} -n {namespace}" if context else f"kubectl -n {namespace}"
