"""The JobSet controller as an add-on of the local cluster (toolchain/addons/controller_addon.py says how)."""

from __future__ import annotations

from typing import Any

from toolchain.addons.controller_addon import ControllerAddOn

# A JobSet that the mutating webhook completes (it adds a startupPolicy).
_PROBE = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "webhook-probe", "namespace": "default"},
    "spec": {"replicatedJobs": [{"name": "probe", "replicas": 1, "template": {"spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "probe", "image": "probe"}],
    }}}}}]},
}  # fmt: skip


def _configuration(_cert_dir: Any, _addons: tuple[str, ...]) -> dict[str, Any]:
    return {"apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration"}


JOBSET = ControllerAddOn(
    name="jobset",
    manager="jobset-manager",
    crds=("jobsets.jobset.x-k8s.io",),
    cluster_role="jobset-manager-role",
    webhook_port=9443,
    health_port=8081,
    configuration=_configuration,
    probe=_PROBE,
    probe_answered=lambda dry_run: "startupPolicy" in dry_run.get("spec", {}),
)
