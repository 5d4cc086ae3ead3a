"""The JobSet controller as an add-on of the local cluster (toolchain/cluster.py).

The manager runs as a process inside the cluster's namespaces, like CoreDNS, rather than as the
Deployment of its own install: there is no registry to pull its image from, and as a process it
needs no Service, no cert-manager and no cert rotation. What it needs instead:

- its CRD, and its ClusterRole bound to the user of its own kubeconfig (a token, as every other
  component here has);
- a serving certificate for its webhook server, signed by the cluster's CA with the address the
  API server calls it on (127.0.0.1 inside the namespace: both run there);
- its webhook configurations, taken from its module's manifests with `clientConfig.url` pointing
  at that address and the CA as `caBundle`, in place of the `service` a Deployment would sit behind;
- a configuration file that turns its own certificate management (which would write a Secret and
  patch the webhook configurations for a Service) and leader election off.

toolchain/build.sh keeps the module's default install, rendered with kustomize, beside the binary.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import yaml

MANAGER = "jobset-manager"
USER = "ddp-infra:jobset"
WEBHOOK_PORT = 9443
HEALTH_PORT = 8081
CRD = "jobsets.jobset.x-k8s.io"
# The manifests build.sh rendered from the module, beside the binary.
INSTALL_MANIFESTS = "install.yaml"
_CLUSTER_ROLE = "jobset-manager-role"
_WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def install_manifests(manager_binary: str) -> Path:
    """The module's rendered install, beside the manager binary the toolchain's link points at."""
    return Path(manager_binary).resolve().parent / INSTALL_MANIFESTS


def _documents(install: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(install.read_text()) if doc]


def api_objects(install: Path) -> list[dict[str, Any]]:
    """The CRD and the manager's access, before the manager starts."""
    objects = []
    for doc in _documents(install):
        if doc["kind"] == "CustomResourceDefinition":
            # One served version: no conversion, so no conversion webhook behind a Service.
            doc["spec"].pop("conversion", None)
            doc["metadata"].get("annotations", {}).pop("cert-manager.io/inject-ca-from", None)
            objects.append(doc)
        elif doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == _CLUSTER_ROLE:
            objects.append(doc)
    objects.append({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "ddp-infra:jobset-manager"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": _CLUSTER_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
    })  # fmt: skip
    if len(objects) != 3:
        raise ValueError(f"{install} lacks the JobSet CRD or the {_CLUSTER_ROLE} ClusterRole")
    return objects


def webhook_configurations(install: Path, ca_pem: bytes) -> list[dict[str, Any]]:
    """The module's webhook configurations, calling the manager at 127.0.0.1 with the cluster's CA."""
    ca_bundle = base64.b64encode(ca_pem).decode()
    configurations = []
    for doc in _documents(install):
        if doc["kind"] in _WEBHOOK_KINDS:
            for webhook in doc["webhooks"]:
                path = webhook["clientConfig"]["service"]["path"]
                webhook["clientConfig"] = {"url": f"https://127.0.0.1:{WEBHOOK_PORT}{path}", "caBundle": ca_bundle}
            configurations.append(doc)
    if len(configurations) != len(_WEBHOOK_KINDS):
        raise ValueError(f"{install} lacks JobSet's webhook configurations")
    return configurations


def manager_configuration(cert_dir: Path) -> str:
    """The manager's --config: webhooks on 127.0.0.1 with our certificate, one instance, no metrics."""
    return json.dumps({
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": WEBHOOK_PORT, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{HEALTH_PORT}"},
        "metrics": {"bindAddress": "0"},
    }, indent=2)  # fmt: skip


# A JobSet that the mutating webhook completes (it adds a startupPolicy): a server dry run of it
# shows whether the API server reaches the webhooks yet.
PROBE = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "webhook-probe", "namespace": "default"},
    "spec": {"replicatedJobs": [{"name": "probe", "replicas": 1, "template": {"spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "probe", "image": "probe"}],
    }}}}}]},
}  # fmt: skip


def webhooks_answer(dry_run_output: str) -> bool:
    return "startupPolicy" in json.loads(dry_run_output).get("spec", {})
