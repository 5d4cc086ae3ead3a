"""Before a stack that deploys to a cluster registers anything: can the cluster ever hold its world?

Without this, `pulumi up` of a world larger than the cluster succeeds: the pods that fit start and
hold their CPU and GPUs, the others stay Pending, and the world never forms. Here the program
reads the cluster's nodes and counts, node by node, how many of the world's pods each could ever
hold: its allocatable resources (not what runs there now) against the pod's requests, and only on
nodes the pods may use (their nodeSelector, required node affinity, and tolerations of the nodes'
NoSchedule and NoExecute taints). A world of more pods than that is refused with the numbers,
while a preview still shows it, unless `scheduling.fitCheck` says to warn or not to check.

A cluster that can grow (cluster-autoscaler or Karpenter is found) gets a warning instead: its
nodes of today do not bound what it can give. So does a cluster whose nodes cannot be read (a
user allowed only its namespace) or that has none.

With a gang scheduler, the world's queue is read too (ddp_infra/queue_quota.py): a world larger
than its queue can ever admit (Kueue's quota with what it may borrow, Volcano's capability) would
wait in the queue for ever, and is refused the same way. A queue that cannot be read (not made
yet, or not readable by the user) gets a warning.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Optional

import pulumi

from .config import StackConfig, parse_quantity
from .gang import amount_text, fewest_pods_admitted, pod_requests
from .names import PROJECT
from .queue_quota import QueueLimit, cohort_of, cohort_peers, kueue_limit, queue_problem, volcano_limit
from .reachability import needs_no_cluster
from .stand_ins import holds_stand_in
from .world import World

KUBECTL_TIMEOUT_S = 30
# Taint effects that keep a pod off a node it does not tolerate (PreferNoSchedule only discourages).
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
NODES_SHOWN = 8  # a refusal names this many nodes, then counts the rest
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
VOLCANO_DEFAULT_QUEUE = "default"  # where Volcano puts a PodGroup that names no queue


class WorldCannotFit(pulumi.RunError):
    """A RunError, so Pulumi reports the message alone, without a stack trace."""


@dataclass(frozen=True)
class PodAsk:
    """What one pod of the world asks of a node, as the scheduler counts it."""

    requests: dict[str, Decimal]  # by resource name; "pods" is always 1
    node_selector: dict[str, str]
    tolerations: tuple[dict[str, Any], ...]
    node_selector_terms: tuple[dict[str, Any], ...]  # required node affinity: any one term must match

    @classmethod
    def of(cls, template: dict[str, Any]) -> "PodAsk":
        spec = template["spec"]
        required = (spec.get("affinity") or {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        return cls(
            requests={**pod_requests(template), "pods": Decimal(1)},
            node_selector=dict(spec.get("nodeSelector") or {}),
            tolerations=tuple(spec.get("tolerations") or ()),
            node_selector_terms=tuple(required.get("nodeSelectorTerms") or ()),
        )


@dataclass(frozen=True)
class NodeRoom:
    name: str
    holds: int  # pods of the world this node could ever hold
    why: str  # its allocatable, or why the pods cannot use it


def node_room(node: dict[str, Any], ask: PodAsk) -> NodeRoom:
    name = node["metadata"]["name"]
    labels = node["metadata"].get("labels") or {}
    closed = _closed_by(node, ask, labels)
    if closed:
        return NodeRoom(name, 0, closed)
    reported = node.get("status", {}).get("allocatable") or {}
    allocatable = {key: parse_quantity(str(value)) for key, value in reported.items()}
    holds = min(int(allocatable.get(resource, Decimal(0)) // amount) for resource, amount in ask.requests.items())
    shown = ", ".join(f"{resource} {reported.get(resource, 0)}" for resource in ask.requests)
    return NodeRoom(name, holds, f"allocatable {shown}")


def _closed_by(node: dict[str, Any], ask: PodAsk, labels: dict[str, str]) -> Optional[str]:
    """Why the world's pods can never run on this node, or None."""
    if node.get("spec", {}).get("unschedulable") and not _tolerated(UNSCHEDULABLE_TAINT, ask.tolerations):
        return "cordoned (unschedulable)"
    for taint in node.get("spec", {}).get("taints") or []:
        if taint.get("effect") in BLOCKING_EFFECTS and not _tolerated(taint, ask.tolerations):
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"taint {taint['key']}{value}:{taint['effect']} not tolerated (scheduling.tolerations)"
    for key, value in ask.node_selector.items():
        if labels.get(key) != value:
            return f"label {key}={value} missing (scheduling.nodeSelector)"
    if ask.node_selector_terms and not any(_term_matches(term, node["metadata"]["name"], labels) for term in ask.node_selector_terms):
        return "no term of the required node affinity matches (scheduling.affinity)"
    return None


def _tolerated(taint: dict[str, Any], tolerations: tuple[dict[str, Any], ...]) -> bool:
    """As Kubernetes' ToleratesTaint."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("key") and toleration["key"] != taint.get("key"):
            continue
        if not toleration.get("key") and toleration.get("operator") != "Exists":
            continue
        if toleration.get("operator") == "Exists" or (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _term_matches(term: dict[str, Any], node_name: str, labels: dict[str, str]) -> bool:
    fields = {"metadata.name": node_name}
    return all(_requirement_holds(r, labels) for r in term.get("matchExpressions") or []) and all(
        _requirement_holds(r, fields) for r in term.get("matchFields") or []
    )


def _requirement_holds(requirement: dict[str, Any], values: dict[str, str]) -> bool:
    key, operator, wanted = requirement["key"], requirement["operator"], requirement.get("values") or []
    present = key in values
    if operator == "In":
        return present and values[key] in wanted
    if operator == "NotIn":
        return not present or values[key] not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values[key].lstrip("-").isdigit():
        return int(values[key]) > int(wanted[0]) if operator == "Gt" else int(values[key]) < int(wanted[0])
    return False


def fit_problem(ask: PodAsk, pods: int, nodes: list[dict[str, Any]]) -> Optional[str]:
    """What keeps `pods` pods of `ask` from ever running at once on `nodes`, with the numbers; None if they fit."""
    rooms = [node_room(node, ask) for node in sorted(nodes, key=lambda n: n["metadata"]["name"])]
    room = sum(r.holds for r in rooms)
    if room >= pods:
        return None
    each = ", ".join(f"{resource} {amount_text(resource, amount)}" for resource, amount in ask.requests.items() if resource != "pods")
    lines = [f"node {r.name}: {r.holds} ({r.why})" for r in rooms[:NODES_SHOWN]]
    if len(rooms) > NODES_SHOWN:
        lines.append(f"... and {len(rooms) - NODES_SHOWN} more nodes, {sum(r.holds for r in rooms[NODES_SHOWN:])} pods between them")
    return (f"{PROJECT}:nodes asks for {pods} pods at once, each requesting {each}; the cluster's {len(rooms)} node(s) "
            f"can ever hold {room} of them:\n    " + "\n    ".join(lines))  # fmt: skip


def read_cluster(context: Optional[str]) -> tuple[list[dict[str, Any]], Optional[str]]:
    """The cluster's nodes, and the autoscaler found that can add more (None: none found).
    Raises OSError or RuntimeError when kubectl cannot read them."""
    nodes = _kubectl_json(context, "get", "nodes")["items"]
    if _kubectl_json(context, "get", "configmaps", "-n", "kube-system", "--field-selector", "metadata.name=cluster-autoscaler-status", check=False).get("items"):
        return nodes, "cluster-autoscaler"
    if _kubectl_json(context, "get", "nodepools.karpenter.sh", check=False).get("items"):
        return nodes, "Karpenter"
    return nodes, None


def _kubectl_json(context: Optional[str], *args: str, check: bool = True) -> dict[str, Any]:
    argv = ["kubectl", *(["--context", context] if context else []), *args, "-o", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=KUBECTL_TIMEOUT_S)
    if done.returncode != 0:
        if check:
            raise RuntimeError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")
        return {}
    return json.loads(done.stdout)


def read_queue_limit(config: StackConfig) -> Optional[QueueLimit]:
    """What the world's gang scheduler's queue can ever admit (None: no queue is used).
    Raises RuntimeError, with why, when the queue cannot be read or counted."""
    gang, context = config.scheduling.gang, config.kubernetes.context
    if gang.scheduler == "kueue":
        local = _kubectl_json(context, "get", "localqueues.kueue.x-k8s.io", gang.queue, "-n", config.namespace.name)
        cluster_queue = _kubectl_json(context, "get", "clusterqueues.kueue.x-k8s.io", local["spec"]["clusterQueue"])
        cohort = cohort_of(cluster_queue)
        others: list[dict[str, Any]] = []
        if cohort:
            if _kubectl_json(context, "get", "cohorts.kueue.x-k8s.io", cohort, check=False):
                raise RuntimeError(f"its ClusterQueue's cohort {cohort} is a Cohort with quota of its own, which is not counted")
            others = cohort_peers(cluster_queue, _kubectl_json(context, "get", "clusterqueues.kueue.x-k8s.io")["items"])
        return kueue_limit(local, cluster_queue, others)
    if gang.scheduler == "volcano":
        return volcano_limit(_kubectl_json(context, "get", "queues.scheduling.volcano.sh", gang.queue or VOLCANO_DEFAULT_QUEUE))
    return None


def require_world_fits(world: World, template: dict[str, Any]) -> None:
    """Raise WorldCannotFit when the cluster's nodes can never hold the whole world at once, or its
    queue never admit it (or warn, as `scheduling.fitCheck` says); see the module's docstring.
    `template` is the world's pod template (ddp_infra.pod.pod_template), the one the stack runs."""
    config: StackConfig = world.config
    mode = config.scheduling.fit_check
    if mode == "off" or needs_no_cluster(config.kubernetes):
        return
    key = f"{PROJECT}:scheduling.fitCheck"
    try:
        nodes, autoscaler = read_cluster(config.kubernetes.context)
    except (OSError, RuntimeError, subprocess.TimeoutExpired, ValueError) as error:
        pulumi.log.warn(f"whether the world fits the cluster is not checked: its nodes cannot be read ({error}); set {key} to off to skip this")
        return
    ask = PodAsk.of(template)
    refusals = []
    if not nodes:
        pulumi.log.warn("whether the world fits the cluster is not checked: the cluster has no nodes (yet)")
    elif holds_stand_in(ask.node_selector):
        pulumi.log.warn("whether the world fits the cluster's nodes is not checked: a nodeSelector value is known only "
                        "once the resource that makes it is (DdpTrainingWorldArgs.node_selector)")
    elif problem := fit_problem(ask, world.min_nodes, nodes):  # an elastic world trains once its minimum runs
        if mode == "warn" or autoscaler:
            grows = f" ({autoscaler} may add nodes)" if autoscaler else ""
            pulumi.log.warn(f"the world may not fit the cluster{grows}: {problem}")
        else:
            refusals.append(f"{problem}\n  to fix: lower {PROJECT}:nodes or the pods' requests (resources, gpusPerNode), let the "
                            "pods use more nodes (scheduling.nodeSelector, scheduling.tolerations), or add nodes")  # fmt: skip
    try:
        limit = read_queue_limit(config)
    except (OSError, RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as error:
        pulumi.log.warn(f"whether the world's queue can ever admit it is not checked: {error}; set {key} to off to skip this")
        limit = None
    if limit and (problem := queue_problem(ask.requests, fewest_pods_admitted(world), limit)):
        if mode == "warn":
            pulumi.log.warn(f"the world may wait in its queue for ever: {problem}")
        else:
            refusals.append(f"{problem}\n  to fix: lower {PROJECT}:nodes or the pods' requests, or have the queue's quota raised")
    if refusals:
        raise WorldCannotFit("the world cannot fit in the cluster; nothing was created:\n  " + "\n  ".join(refusals)
                             + f"\n  to create it anyway, set {key} to warn")  # fmt: skip
