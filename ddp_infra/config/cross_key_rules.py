"""The rules about several keys at once (`cross_key_problems`): each runs on the keys that are valid on
their own, after every top-level key of the stack config (stack.py) has been judged alone."""

from __future__ import annotations

import functools
from typing import Any, Callable

from trainer import contract

from ..names import PROGRAM_ENV, SECONDARY_NETWORKS_ANNOTATION
from .pod import label_key_problem
from .problems import NOT_SHOWN, Problem, full_key
from .scalars import parse_quantity


Rule = Callable[[dict[str, Any]], list[Problem]]


def _on_valid(*keys: str) -> Callable[[Rule], Rule]:
    """A rule that runs only when each of `keys` is valid on its own (and finds nothing otherwise)."""

    def wrap(rule: Rule) -> Rule:
        @functools.wraps(rule)
        def checked(valid: dict[str, Any]) -> list[Problem]:
            return rule(valid) if all(key in valid for key in keys) else []

        return checked

    return wrap


@_on_valid("gpusPerNode", "procsPerNode")
def _one_process_per_gpu(valid: dict[str, Any]) -> list[Problem]:
    gpus, procs = valid["gpusPerNode"], valid["procsPerNode"]
    if gpus and procs and procs != gpus:
        return [Problem(
            full_key(["procsPerNode"]), repr(procs),
            f"0 or {gpus} (one process per GPU: fewer leaves GPUs idle, more makes NCCL share a GPU)",
        )]  # fmt: skip
    return []


@_on_valid("nodes", "storage")
def _each_claim_admits_every_pod(valid: dict[str, Any]) -> list[Problem]:
    if valid["nodes"].maximum <= 1:
        return []
    return [
        Problem(
            full_key(["storage", role, "accessMode"]), repr(volume.access_mode),
            "ReadWriteMany, ReadOnlyMany or ReadWriteOnce when nodes > 1 (ReadWriteOncePod admits one pod)",
        )
        for role, volume in valid["storage"].volumes().items()
        if volume.access_mode == "ReadWriteOncePod"
    ]  # fmt: skip


@_on_valid("shmSize", "resources")
def _shm_fits_in_the_memory_limit(valid: dict[str, Any]) -> list[Problem]:
    limit = valid["resources"].limits.memory
    if limit and parse_quantity(valid["shmSize"]) >= parse_quantity(limit):
        return [Problem(
            full_key(["shmSize"]), repr(valid["shmSize"]),
            f"less than resources.limits.memory ({limit}): /dev/shm is memory and counts against it",
        )]  # fmt: skip
    return []


@_on_valid("network", "resources")
def _rdma_resources_are_asked_for_once(valid: dict[str, Any]) -> list[Problem]:
    network, extended = valid["network"], valid["resources"].extended
    return [
        Problem(
            full_key(["resources", "extended", name]), repr(extended[name]),
            "a resource not in network.rdmaResources (that key requests it already)",
        )
        for name in network.rdma_resources
        if network.infiniband and name in extended
    ]  # fmt: skip


@_on_valid("workload", "nodes")
def _jobset_pod_names_are_dns_labels(valid: dict[str, Any]) -> list[Problem]:
    """JobSet refuses a JobSet whose pod names (<name>-node-0-<index>-<5 random>) are not DNS-1035
    labels (a workload name starts with a letter whatever its kind: its Service's name is one too)."""
    if valid["workload"].kind != contract.JOBSET:
        return []
    name, nodes = valid["workload"].name, valid["nodes"].maximum
    fixed = len(contract.pod_hostname(contract.JOBSET, name, nodes - 1)) + len("-abcde") - len(name)
    if len(name) + fixed > 63:
        return [Problem(
            full_key(["workload", "name"]), repr(name),
            f"with kind jobset, a name of at most {63 - fixed} characters at nodes={nodes} "
            f"(its pods are named <name>-{contract.JOBSET_REPLICATED_JOB}-0-<index>-<5 random>, at most 63)",
        )]  # fmt: skip
    return []


@_on_valid("workload", "scheduling")
def _kueue_admits_jobs(valid: dict[str, Any]) -> list[Problem]:
    if valid["scheduling"].gang.scheduler == "kueue" and valid["workload"].kind == contract.STATEFULSET:
        return [Problem(
            full_key(["scheduling", "gang", "scheduler"]), repr("kueue"),
            "none or volcano with workload.kind statefulset (Kueue admits a Job or a JobSet as one workload; "
            "set workload.kind to job or jobset)",
        )]  # fmt: skip
    return []


@_on_valid("workload", "nodes", "scheduling")
def _topology_slices_divide_the_pods(valid: dict[str, Any]) -> list[Problem]:
    """Kueue places the Job's pods in slices of `size`: a count it knows, which they divide."""
    topology = valid["scheduling"].topology
    if not (topology and topology.slice):
        return []
    size, nodes = topology.slice.size, valid["nodes"]
    key = full_key(["scheduling", "topology", "slice", "size"])
    pods = nodes.maximum + valid["workload"].spare_pods
    if pods % size:
        return [Problem(key, repr(size), f"a divisor of the Job's {pods} pods (nodes and workload.sparePods), such as 1 or {pods}")]
    return []


@_on_valid("workload", "scheduling")
def _kubernetes_gang_is_a_job(valid: dict[str, Any]) -> list[Problem]:
    """The Kubernetes scheduler's gang is the PodGroup the Job controller makes (ddp_infra/gang.py):
    no controller makes a StatefulSet's pods one. (What else it cannot gang depends on the version
    of the Workload API the cluster serves: ddp_infra/cluster_apis.py.)"""
    if valid["scheduling"].gang.scheduler != "kubernetes" or valid["workload"].kind != contract.STATEFULSET:
        return []
    reason = "workload.kind statefulset (the Job controller makes the PodGroup: set workload.kind to job or jobset)"
    return [Problem(full_key(["scheduling", "gang", "scheduler"]), repr("kubernetes"), f"none, kueue or volcano with {reason}")]


_RENDEZVOUS_APART = "rendezvous.backend c10d with store own-pod (the defaults), or etcd-v2"


def _rendezvous_on_pod_0(valid: dict[str, Any]) -> str | None:
    """The setting that puts the store on pod 0 (RendezvousConfig.store_on_pod_0), so that no world
    forms without it ("backend static" or "store pod-0"); None where it lives apart."""
    rendezvous = valid.get("rendezvous")
    if rendezvous is None or not rendezvous.store_on_pod_0:
        return None
    return "backend static" if rendezvous.backend == "static" else "store pod-0"


@_on_valid("nodes")
def _elastic_world_forms_from_any_pods(valid: dict[str, Any]) -> list[Problem]:
    """What an elastic world (nodes MIN:MAX) needs: pods any subset of which can form it, and a
    scheduler that admits part of it."""
    if not valid["nodes"].elastic:
        return []
    problems: list[Problem] = []
    nodes = repr(str(valid["nodes"]))
    kind = valid["workload"].kind if "workload" in valid else None
    if kind == contract.STATEFULSET:
        problems.append(Problem(
            full_key(["nodes"]), nodes,
            "one number with workload.kind statefulset (its pods are replaced one identity each and never do without "
            "one); set workload.kind to job or jobset for an elastic world",
        ))
    if "scheduling" in valid and valid["scheduling"].gang.scheduler == "kueue":
        # Kueue KEP-77 (sigs.k8s.io/kueue keps/77-dynamically-sized-jobs): partial admission fixes a Job's
        # parallelism once, when it is admitted, and its elastic workload slices only follow a
        # parallelism someone else changes, and refuse a Job with partial admission.
        problems.append(Problem(
            full_key(["nodes"]), nodes,
            "one number with scheduling.gang.scheduler kueue: Kueue admits a world once, at a size it never grows "
            "(a JobSet whole; a Job, by its partial admission, at what the quota holds then, its parallelism fixed), "
            "so an elastic world would never grow toward its maximum as capacity appears; use scheduler volcano, or "
            "kubernetes on a cluster serving scheduling.k8s.io/v1beta1, for an elastic world admitted whole at MIN",
        ))
    if where := _rendezvous_on_pod_0(valid):
        problems.append(Problem(
            full_key(["nodes"]), nodes,
            f"one number with rendezvous.{where} (the world would need pod 0 in every size); an elastic world needs "
            f"{_RENDEZVOUS_APART}",
        ))
    return problems


@_on_valid("workload", "rendezvous")
def _liveness_has_a_port_of_its_own(valid: dict[str, Any]) -> list[Problem]:
    port = valid["workload"].liveness.port
    if valid["workload"].liveness.seconds and port == valid["rendezvous"].port:
        return [Problem(
            full_key(["workload", "liveness", "port"]), repr(port),
            f"a port other than rendezvous.port ({port}): the entrypoint answers the kubelet's probe on its own port",
        )]  # fmt: skip
    return []


@_on_valid("workload")
def _spare_pods_take_any_pods_place(valid: dict[str, Any]) -> list[Problem]:
    """What spare pods need: a world formed from whichever pods join first, and a workload whose
    lost pods are replaced one by one."""
    spares = valid["workload"].spare_pods
    if not spares:
        return []
    problems: list[Problem] = []
    if valid["workload"].kind == contract.STATEFULSET:
        problems.append(Problem(
            full_key(["workload", "sparePods"]), repr(spares),
            "0 with workload.kind statefulset (its lost pod is replaced at once, in its own identity); "
            "set workload.kind to job or jobset for spare pods",
        ))
    if where := _rendezvous_on_pod_0(valid):
        problems.append(Problem(
            full_key(["workload", "sparePods"]), repr(spares),
            f"0 with rendezvous.{where} (a spare takes any pod's place, pod 0's too); spare pods need {_RENDEZVOUS_APART}",
        ))
    return problems


@_on_valid("network", "annotations")
def _secondary_networks_write_their_annotation(valid: dict[str, Any]) -> list[Problem]:
    annotations = valid["annotations"]
    if valid["network"].secondary_networks and SECONDARY_NETWORKS_ANNOTATION in annotations:
        return [Problem(
            full_key(["annotations", SECONDARY_NETWORKS_ANNOTATION]), repr(annotations[SECONDARY_NETWORKS_ANNOTATION]),
            "no value here when network.secondaryNetworks is set (it writes this annotation)",
        )]  # fmt: skip
    return []


@_on_valid("labels")
def _labels_are_the_users(valid: dict[str, Any]) -> list[Problem]:
    labels = valid["labels"]
    return [
        Problem(full_key(["labels", key]), repr(labels[key]), allowed)
        for key in labels
        if (allowed := label_key_problem(key))
    ]


# The variables the program sets itself: the contract's, and HOME.
_PROGRAM_SET_ENV = {var.name for var in contract.ALL} | set(PROGRAM_ENV)
_NOT_A_PROGRAM_VARIABLE = "a name the program does not set (this one comes from the env contract)"


@_on_valid("env")
def _env_names_are_the_users(valid: dict[str, Any]) -> list[Problem]:
    env = valid["env"]
    return [Problem(full_key(["env", name]), repr(env[name]), _NOT_A_PROGRAM_VARIABLE) for name in env if name in _PROGRAM_SET_ENV]


@_on_valid("secretEnv")
def _secret_env_names_are_the_users_and_their_own(valid: dict[str, Any]) -> list[Problem]:
    problems = []
    for name in valid["secretEnv"]:
        if name in _PROGRAM_SET_ENV:
            problems.append(Problem(full_key(["secretEnv", name]), NOT_SHOWN, _NOT_A_PROGRAM_VARIABLE))
        elif name in valid.get("env", {}):
            problems.append(Problem(
                full_key(["secretEnv", name]), NOT_SHOWN, "a name not in env too (a variable has one value)",
            ))  # fmt: skip
    return problems


# Every rule about several keys, in the order their problems are reported.
CROSS_KEY_RULES: tuple[Rule, ...] = (
    _one_process_per_gpu,
    _each_claim_admits_every_pod,
    _shm_fits_in_the_memory_limit,
    _rdma_resources_are_asked_for_once,
    _jobset_pod_names_are_dns_labels,
    _kueue_admits_jobs,
    _topology_slices_divide_the_pods,
    _kubernetes_gang_is_a_job,
    _elastic_world_forms_from_any_pods,
    _liveness_has_a_port_of_its_own,
    _spare_pods_take_any_pods_place,
    _secondary_networks_write_their_annotation,
    _labels_are_the_users,
    _env_names_are_the_users,
    _secret_env_names_are_the_users_and_their_own,
)


def cross_key_problems(valid: dict[str, Any]) -> list[Problem]:
    """Rules about whole keys or several keys at once; each runs only on keys that are valid."""
    return [problem for rule in CROSS_KEY_RULES for problem in rule(valid)]
