"""The Kueue controller as an add-on of the local cluster (toolchain/addons/controller_addon.py says how).

It manages Indexed Jobs, and JobSets where the JobSet add-on runs too; a Job or JobSet is Kueue's
when it carries the `kueue.x-k8s.io/queue-name` label. Its on-demand visibility API (an aggregated
API server of its own) is off: nothing here reads it. Its CRDs serve v1beta2 (stored) and v1beta1,
converted by its webhook (toolchain/addons/controller_addon.py).
"""

from __future__ import annotations

from typing import Any

from toolchain.addons.controller_addon import ControllerAddOn

# A Job in a queue: Kueue's mutating webhook suspends it.
_PROBE = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "webhook-probe", "namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": "probe"}},
    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "probe", "image": "probe"}]}}},
}  # fmt: skip


def _configuration(_cert_dir: Any, addons: tuple[str, ...]) -> dict[str, Any]:
    frameworks = ["batch/job", *(["jobset.x-k8s.io/jobset"] if "jobset" in addons else [])]
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "integrations": {"frameworks": frameworks},
        "featureGates": {"VisibilityOnDemand": False},
    }


KUEUE = ControllerAddOn(
    name="kueue",
    manager="kueue-manager",
    crds=tuple(f"{plural}.kueue.x-k8s.io" for plural in (
        "admissionchecks", "clusterqueues", "cohorts", "localqueues", "multikueueclusters", "multikueueconfigs",
        "provisioningrequestconfigs", "resourceflavors", "topologies", "workloadpriorityclasses", "workloads",
    )),  # fmt: skip
    cluster_role="kueue-manager-role",
    webhook_port=9444,
    health_port=8082,
    configuration=_configuration,
    probe=_PROBE,
    probe_answered=lambda dry_run: dry_run.get("spec", {}).get("suspend") is True,
    webhook_groups=("kueue.x-k8s.io", "batch", "jobset.x-k8s.io"),
    namespace="kueue-system",
    namespaced_roles=("kueue-manager-secrets-role",),
    # With its own certificate management off, it reads its metrics server's certificate from
    # there, and exits without one, even with the metrics server off.
    fixed_cert_dirs=("/etc/kueue/metrics/certs",),
)
