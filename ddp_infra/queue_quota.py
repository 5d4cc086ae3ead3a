"""The most a gang scheduler's queue can ever admit of the world at once (`scheduling.gang`), for the
fit check (ddp_infra/fit.py): a world larger than that waits in its queue for ever.

- **Kueue** admits a pod set from its LocalQueue's ClusterQueue, one flavor per resource for the
  whole pod set: per resource, the most is the largest, over the flavors, of the nominal quota
  plus what the queue may borrow (its borrowingLimit, and at most what the other queues of its
  cohort lend: their lendingLimit, else their nominal quota). A resource the world asks for and no
  resource group covers is never admitted. A cohort that is an object of its own (hierarchical
  cohorts, with quota of its own) is not counted: the check is skipped with a warning.
- **Volcano** admits no more than its Queue's `capability`, per resource (unset: unbounded).

Pure: the queue objects as the API server returns them. Reading them is fit.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Optional

from .config import parse_quantity
from .gang import amount_text


@dataclass(frozen=True)
class QueueLimit:
    queue: str  # the queue as a person names it, e.g. "Kueue ClusterQueue worlds (LocalQueue team-a)"
    most: dict[str, tuple[Decimal, str]]  # resource: (the most it admits, how that adds up)
    covered_only: bool  # resources outside `most` are never admitted (Kueue), else unbounded (Volcano)


def _quantity(value: Any) -> Decimal:
    return parse_quantity(str(value))


def _lends(queue: dict[str, Any], flavor: str, resource: str) -> Decimal:
    for group in queue.get("spec", {}).get("resourceGroups") or []:
        for entry in group.get("flavors") or []:
            if entry["name"] != flavor:
                continue
            for quota in entry.get("resources") or []:
                if quota["name"] == resource:
                    return _quantity(quota.get("lendingLimit", quota["nominalQuota"]))
    return Decimal(0)


def cohort_of(cluster_queue: dict[str, Any]) -> Optional[str]:
    """The ClusterQueue's cohort: `cohortName` in Kueue's v1beta2 API (preferred from Kueue 0.15),
    `cohort` in v1beta1."""
    spec = cluster_queue.get("spec", {})
    return spec.get("cohortName") or spec.get("cohort")


def cohort_peers(cluster_queue: dict[str, Any], cluster_queues: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The other ClusterQueues of the queue's cohort (none without one)."""
    cohort, name = cohort_of(cluster_queue), cluster_queue["metadata"]["name"]
    return [q for q in cluster_queues if cohort and cohort_of(q) == cohort and q["metadata"]["name"] != name]


def kueue_limit(local_queue: dict[str, Any], cluster_queue: dict[str, Any], cohort: list[dict[str, Any]]) -> QueueLimit:
    """`cohort`: the other ClusterQueues of the same cohort (none without one)."""
    most: dict[str, tuple[Decimal, str]] = {}
    for group in cluster_queue.get("spec", {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for quota in flavor.get("resources") or []:
                name, nominal = quota["name"], _quantity(quota["nominalQuota"])
                lent = sum((_lends(other, flavor["name"], name) for other in cohort), Decimal(0))
                borrow = min(_quantity(quota["borrowingLimit"]), lent) if "borrowingLimit" in quota else lent
                total = nominal + borrow
                if name not in most or total > most[name][0]:
                    how = f"flavor {flavor['name']}: nominal quota {quota['nominalQuota']}" + (f" + {amount_text(name, borrow)} borrowed from its cohort" if borrow else "")
                    most[name] = (total, how)
    queue = f"Kueue ClusterQueue {cluster_queue['metadata']['name']} (LocalQueue {local_queue['metadata']['name']})"
    return QueueLimit(queue, most, covered_only=True)


def volcano_limit(queue: dict[str, Any]) -> QueueLimit:
    capability = queue.get("spec", {}).get("capability") or {}
    most = {name: (_quantity(value), f"capability {value}") for name, value in capability.items()}
    return QueueLimit(f"Volcano Queue {queue['metadata']['name']}", most, covered_only=False)


def queue_problem(requests: dict[str, Decimal], pods: int, limit: QueueLimit) -> Optional[str]:
    """What keeps `pods` pods, each asking `requests`, from ever being admitted together, with the
    numbers; None where the queue can admit them."""
    asked = {resource: amount * pods for resource, amount in requests.items()}
    short = [
        f"{resource}: {amount_text(resource, total)} asked, at most {amount_text(resource, limit.most[resource][0])} ({limit.most[resource][1]})"
        for resource, total in asked.items()
        if resource in limit.most and total > limit.most[resource][0]
    ]
    if limit.covered_only:
        # Kueue counts pods only where a resource group covers them.
        short += [f"{resource}: {amount_text(resource, total)} asked, no quota for it" for resource, total in asked.items()
                  if resource not in limit.most and resource != "pods" and total > 0]  # fmt: skip
    if not short:
        return None
    return f"the world's {pods} pods together ask more than {limit.queue} can ever admit:\n    " + "\n    ".join(short)
