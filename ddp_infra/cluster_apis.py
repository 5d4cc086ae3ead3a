"""Before anything is registered: does the cluster serve the APIs the stack's config relies on?

`scheduling.gang.scheduler: kubernetes` needs the Workload API (its Workload and PodGroup), off by
default in every release that has it: beta as `scheduling.k8s.io/v1beta1` in Kubernetes 1.37,
alpha as `scheduling.k8s.io/v1alpha2` in 1.36. Without it the Job controller makes no PodGroup
and the world is scheduled pod by pod, with nothing to say so. The program reads the API group's
discovery documents first, newest version first, and writes the world for the one the cluster
serves (ddp_infra/gang.py); a cluster that serves none is refused with what to turn on, at
preview, before anything changes. (The controller manager's and the scheduler's gates cannot be
read from the API: the message and the README say what a cluster needs.)

A cluster whose discovery cannot be read gets a warning and the newest version; a stack that
renders manifests, or runs under Pulumi's mocks, is not asked (ddp_infra.reachability.needs_no_cluster).
"""

from __future__ import annotations

import json
import subprocess
from typing import Optional

import pulumi

from .config import StackConfig
from .names import PROJECT, WORKLOAD_API_ALPHA, WORKLOAD_API_BETA
from .reachability import needs_no_cluster

KUBECTL_TIMEOUT_S = 30
WORKLOAD_API_RESOURCES = ("workloads", "podgroups")
# What each version of the Workload API needs of a cluster, newest first.
WORKLOAD_API_NEEDS = {
    WORKLOAD_API_BETA: "Kubernetes 1.37 with the feature gates GenericWorkload (API server, controller manager, scheduler) "
                       f"and WorkloadWithJob (controller manager), and the API server's --runtime-config={WORKLOAD_API_BETA}=true",
    WORKLOAD_API_ALPHA: "Kubernetes 1.36 with the feature gates GenericWorkload (API server, controller manager, scheduler), "
                        "WorkloadWithJob (controller manager) and GangScheduling (scheduler), "
                        f"and the API server's --runtime-config={WORKLOAD_API_ALPHA}=true",
}  # fmt: skip
SCHEDULER_KEY = f"{PROJECT}:scheduling.gang.scheduler"
REFUSED = "the cluster lacks what the stack's config needs; nothing was created:\n  "


class ClusterLacksApi(pulumi.RunError):
    """A RunError, so Pulumi reports the message alone, without a stack trace."""


def missing_resources(wanted: tuple[str, ...], discovery: Optional[dict]) -> list[str]:
    """Which of `wanted` an API group/version's discovery document (None: not served) lacks."""
    served = {resource["name"] for resource in (discovery or {}).get("resources") or []}
    return [name for name in wanted if name not in served]


def read_discovery(context: Optional[str], group_version: str) -> Optional[dict]:
    """The API group/version's discovery document; None where the API server does not serve it.
    Raises RuntimeError when kubectl fails otherwise."""
    argv = ["kubectl", *(["--context", context] if context else []), "get", "--raw", f"/apis/{group_version}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=KUBECTL_TIMEOUT_S)
    if done.returncode == 0:
        return json.loads(done.stdout)
    if "NotFound" in done.stderr or "could not find the requested resource" in done.stderr:
        return None
    raise RuntimeError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")


def chosen_workload_api(missing: dict[str, list[str]]) -> Optional[str]:
    """The newest Workload API version of which nothing is missing (what each lacks, newest first)."""
    return next((version for version, lacks in missing.items() if not lacks), None)


def lacks_every_version(missing: dict[str, list[str]]) -> str:
    lacking = "; ".join(f"{version} {', '.join(lacks)}" for version, lacks in missing.items())
    return (f"the cluster serves no version of the Workload API (it lacks {lacking}), which {SCHEDULER_KEY} kubernetes "
            "needs (the Kubernetes scheduler's gang scheduling): "
            + "; or ".join(WORKLOAD_API_NEEDS.values())
            + f"\n  to fix: run the stack on such a cluster, or set {SCHEDULER_KEY} to kueue or volcano")  # fmt: skip


def alpha_cannot(config: StackConfig) -> list[str]:
    """What the alpha Workload API (1.36) cannot gang: its Job controller's PodGroup is every pod."""
    why_not = []
    if config.nodes.elastic:
        why_not.append(f"an elastic world, nodes {config.nodes}")
    if config.workload.spare_pods:
        why_not.append(f"workload.sparePods {config.workload.spare_pods}")
    return [f"{SCHEDULER_KEY} kubernetes with {reason} needs {WORKLOAD_API_BETA} ({WORKLOAD_API_NEEDS[WORKLOAD_API_BETA]}); "
            f"this cluster serves {WORKLOAD_API_ALPHA}, whose Job controller makes a PodGroup of every pod, the maximum and "
            f"the spares, at once\n  to fix: run the stack on a 1.37 cluster, or set {SCHEDULER_KEY} to kueue or volcano"
            for reason in why_not]  # fmt: skip


def require_cluster_apis(config: StackConfig) -> Optional[str]:
    """The Workload API version the world is written for: the newest the cluster serves, where the
    config's scheduler is the Kubernetes scheduler (None otherwise, or where the cluster is not
    asked). Raises ClusterLacksApi, naming what is missing, when it serves none, or only one that
    cannot gang the world."""
    if config.scheduling.gang.scheduler != "kubernetes" or needs_no_cluster(config.kubernetes):
        return None
    missing = {}
    for group_version in WORKLOAD_API_NEEDS:
        try:
            missing[group_version] = missing_resources(WORKLOAD_API_RESOURCES, read_discovery(config.kubernetes.context, group_version))
        except (OSError, RuntimeError, subprocess.TimeoutExpired, ValueError) as error:
            pulumi.log.warn(f"which version of the Workload API the cluster serves is not checked ({error}); "
                            f"the world is written for {WORKLOAD_API_BETA}")  # fmt: skip
            return None
    chosen = chosen_workload_api(missing)
    if chosen is None:
        raise ClusterLacksApi(REFUSED + lacks_every_version(missing))
    if chosen == WORKLOAD_API_ALPHA and (problems := alpha_cannot(config)):
        raise ClusterLacksApi(REFUSED + "\n  ".join(problems))
    return chosen
