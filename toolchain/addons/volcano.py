"""Volcano's scheduler as an add-on of the local cluster (toolchain/cluster/).

Only the scheduler runs (vc-scheduler, built by toolchain/build.sh from volcano.sh/volcano): it is
what binds a PodGroup's pods all together or not at all. Volcano's controllers and admission
webhooks are not needed for pods that name a PodGroup the stack made itself. Like the other
add-ons it runs as a process in the cluster's namespaces, with a token of its own bound to the
ClusterRole of Volcano's own chart, and the CRDs of Volcano's module (build.sh keeps them and the
chart's scheduler template in its `volcano-crds` directory).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from toolchain.addons.controller_addon import AddOn

VOLCANO = AddOn(name="volcano", manager="vc-scheduler")
HEALTH_PORT = 11251
METRICS_PORT = 8085
CRDS_DIR = "volcano-crds"  # in the toolchain's bin directory
CHART_SCHEDULER = "scheduler.yaml"  # the chart's template of the scheduler's objects, in CRDS_DIR
CLUSTER_ROLE = "volcano-scheduler"
DEFAULT_QUEUE = "default"
ESTABLISHED = ("podgroups.scheduling.volcano.sh", "queues.scheduling.volcano.sh")


def crds(crds_dir: Path) -> list[dict[str, Any]]:
    return [yaml.safe_load(path.read_text()) for path in sorted(crds_dir.glob("*.volcano.sh_*.yaml"))]


def cluster_role(crds_dir: Path) -> dict[str, Any]:
    """The chart's ClusterRole of the scheduler. Its rules are plain YAML; the template lines of its
    metadata (release name, labels) are left out and the name is ours."""
    for document in (crds_dir / CHART_SCHEDULER).read_text().split("\n---"):
        if re.search(r"^kind: ClusterRole$", document, re.MULTILINE):
            plain = "\n".join(line for line in document.splitlines() if "{{" not in line)
            role = yaml.safe_load(plain)
            role["metadata"] = {"name": CLUSTER_ROLE}
            return role
    raise ValueError(f"{crds_dir / CHART_SCHEDULER} has no ClusterRole")


def api_objects(crds_dir: Path) -> list[dict[str, Any]]:
    """The CRDs, the scheduler's access and the queue a PodGroup without one goes to."""
    return [*crds(crds_dir), cluster_role(crds_dir), VOLCANO.role_binding(CLUSTER_ROLE)]


def default_queue() -> dict[str, Any]:
    """What Volcano's controllers would create: the queue of PodGroups that name none."""
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": DEFAULT_QUEUE},
        "spec": {"weight": 1, "reclaimable": True},
    }  # fmt: skip


def scheduler_args(kubeconfig: Path, local_provisioner: str) -> list[str]:
    """Its default actions and plugins (enqueue, allocate, backfill; gang among them), one instance.

    The cluster's claims are bound to static local volumes of `local_provisioner`
    (`kubernetes.io/no-provisioner`): Volcano counts each such claim as a CSI attachment the node
    has no allowance for and binds no pod that has one, unless the provisioner is ignored, as it
    ignores local-path's itself.
    """
    return [
        "--kubeconfig", str(kubeconfig), "--leader-elect=false",
        "--enable-healthz", "--healthz-address", f"127.0.0.1:{HEALTH_PORT}", "--listen-address", f"127.0.0.1:{METRICS_PORT}",
        "--ignored-provisioners", local_provisioner,
    ]  # fmt: skip
