"""Before anything is registered: does the cluster serve the APIs the stack's config relies on?

`scheduling.gang.scheduler: kubernetes` needs the Workload API (`scheduling.k8s.io/v1alpha2`, its
Workload and PodGroup), alpha in Kubernetes 1.36: off unless the API server runs with the feature
gate GenericWorkload and `--runtime-config=scheduling.k8s.io/v1alpha2=true`. Without it the Job
controller makes no PodGroup and the world is scheduled pod by pod, with nothing to say so. The
program reads the API group's discovery document first and refuses with what is missing, at
preview, before anything changes. (The gates of the controller manager, WorkloadWithJob, and of
the scheduler, GangScheduling, cannot be read from the API: the README says what a cluster needs.)

A cluster whose discovery cannot be read gets a warning; a stack that renders manifests, or runs
under Pulumi's mocks, is not checked (ddp_infra.reachability.needs_no_cluster).
"""

from __future__ import annotations

import json
import subprocess
from typing import Optional

import pulumi

from .config import StackConfig
from .gang import WORKLOAD_API_VERSION
from .names import PROJECT
from .reachability import needs_no_cluster

KUBECTL_TIMEOUT_S = 30
WORKLOAD_API_RESOURCES = ("workloads", "podgroups")


class ClusterLacksApi(pulumi.RunError):
    """A RunError, so Pulumi reports the message alone, without a stack trace."""


def required_apis(config: StackConfig) -> dict[str, tuple[str, ...]]:
    """API group/version: the resources of it that the config needs the cluster to serve."""
    if config.scheduling.gang.scheduler == "kubernetes":
        return {WORKLOAD_API_VERSION: WORKLOAD_API_RESOURCES}
    return {}


def missing_resources(wanted: tuple[str, ...], discovery: Optional[dict]) -> list[str]:
    """Which of `wanted` an API group/version's discovery document (None: not served) lacks."""
    served = {resource["name"] for resource in (discovery or {}).get("resources") or []}
    return [name for name in wanted if name not in served]


def api_problem(group_version: str, missing: list[str]) -> str:
    return (f"the cluster does not serve {group_version} {', '.join(missing)}, which "
            f"{PROJECT}:scheduling.gang.scheduler kubernetes needs (the Kubernetes scheduler's gang scheduling, the Workload API): "
            "Kubernetes 1.36 with the feature gates GenericWorkload (API server, controller manager, scheduler), "
            f"WorkloadWithJob (controller manager) and GangScheduling (scheduler), and the API server's --runtime-config={group_version}=true")  # fmt: skip


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


def require_cluster_apis(config: StackConfig) -> None:
    """Raise ClusterLacksApi, naming what is missing, when the cluster does not serve an API the
    config needs."""
    wanted = required_apis(config)
    if not wanted or needs_no_cluster(config.kubernetes):
        return
    problems = []
    for group_version, resources in wanted.items():
        try:
            discovery = read_discovery(config.kubernetes.context, group_version)
        except (OSError, RuntimeError, subprocess.TimeoutExpired, ValueError) as error:
            pulumi.log.warn(f"whether the cluster serves {group_version} is not checked: {error}")
            continue
        if missing := missing_resources(resources, discovery):
            problems.append(api_problem(group_version, missing))
    if problems:
        raise ClusterLacksApi("the cluster lacks what the stack's config needs; nothing was created:\n  " + "\n  ".join(problems)
                              + f"\n  to fix: run the stack on such a cluster, or set {PROJECT}:scheduling.gang.scheduler to kueue or volcano")  # fmt: skip
