"""A controller add-on of the local cluster (toolchain/cluster/): JobSet's, Kueue's.

The manager runs as a process inside the cluster's namespaces, like CoreDNS, rather than as the
Deployment of its own install: there is no registry to pull its image from, and as a process it
needs no Service, no cert-manager and no cert rotation. What it needs instead:

- its CRDs, and its ClusterRole bound to the user of its own kubeconfig (a token, as every other
  component here has);
- a serving certificate for its webhook server, signed by the cluster's CA with the address the
  API server calls it on (127.0.0.1 inside the namespace: both run there);
- its webhook configurations, taken from its module's manifests with `clientConfig.url` pointing
  at that address and the CA as `caBundle`, in place of the `service` a Deployment would sit behind;
- a configuration file that turns its own certificate management (which would write a Secret and
  patch the webhook configurations for a Service) and leader election off.

toolchain/build.sh keeps each module's default install, rendered with kustomize, beside the binary.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

# The manifests build.sh rendered from the module, beside the binary.
INSTALL_MANIFESTS = "install.yaml"
_WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@dataclass(frozen=True)
class AddOn:
    name: str  # what LocalCluster(addons=...) and `cluster up --addon` call it
    manager: str  # its binary in the toolchain

    @property
    def user(self) -> str:
        """The user its token authenticates as."""
        return f"ddp-infra:{self.name}"

    def role_binding(self, cluster_role: str) -> dict[str, Any]:
        """Binds `cluster_role` to its user."""
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": f"ddp-infra:{self.manager}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": self.user}],
        }  # fmt: skip


@dataclass(frozen=True)
class ControllerAddOn(AddOn):
    crds: tuple[str, ...]  # every CRD of the install, each Established before the manager starts
    cluster_role: str  # the manager's ClusterRole in the install
    webhook_port: int
    health_port: int
    # (the certificate directory, the cluster's other add-ons) -> the manager's --config
    configuration: Callable[[Path, tuple[str, ...]], dict[str, Any]]
    # An object one of its mutating webhooks changes, and how to tell from a server dry run's output
    # that it did: the API server reaches the webhooks.
    probe: dict[str, Any]
    probe_answered: Callable[[dict[str, Any]], bool]
    # Only webhooks whose rules name one of these API groups (None: all of them): the others serve
    # integrations this cluster does not run, and would only be called for nothing.
    webhook_groups: tuple[str, ...] | None = None
    # Where the manager keeps its own namespaced objects, created with the CRDs.
    namespace: str | None = None
    # Directories where the manager reads a certificate whatever its configuration says: the
    # webhook's certificate is bind-mounted there, inside the cluster's mount namespace.
    fixed_cert_dirs: tuple[str, ...] = field(default=())

    def install_manifests(self, manager_binary: str) -> Path:
        """The module's rendered install, beside the manager binary the toolchain's link points at."""
        return Path(manager_binary).resolve().parent / INSTALL_MANIFESTS

    def api_objects(self, install: Path) -> list[dict[str, Any]]:
        """The CRDs and the manager's access, before the manager starts."""
        crds, roles = [], []
        for doc in _documents(install):
            if doc["kind"] == "CustomResourceDefinition":
                # One served version each: no conversion, so no conversion webhook behind a Service.
                doc["spec"].pop("conversion", None)
                doc["metadata"].get("annotations", {}).pop("cert-manager.io/inject-ca-from", None)
                crds.append(doc)
            elif doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == self.cluster_role:
                roles.append(doc)
        missing = sorted(set(self.crds) - {crd["metadata"]["name"] for crd in crds})
        if missing or len(roles) != 1:
            raise ValueError(f"{install} lacks {', '.join(missing) or 'no CRD'} or the {self.cluster_role} ClusterRole")
        namespace = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}] if self.namespace else []
        return [*namespace, *crds, *roles, self.role_binding(self.cluster_role)]

    def webhook_configurations(self, install: Path, ca_pem: bytes) -> list[dict[str, Any]]:
        """The module's webhook configurations, calling the manager at 127.0.0.1 with the cluster's CA."""
        ca_bundle = base64.b64encode(ca_pem).decode()
        configurations = []
        for doc in _documents(install):
            if doc["kind"] in _WEBHOOK_KINDS:
                doc["webhooks"] = [webhook for webhook in doc["webhooks"] if self._serves(webhook)]
                for webhook in doc["webhooks"]:
                    path = webhook["clientConfig"]["service"]["path"]
                    webhook["clientConfig"] = {"url": f"https://127.0.0.1:{self.webhook_port}{path}", "caBundle": ca_bundle}
                configurations.append(doc)
        if len(configurations) != len(_WEBHOOK_KINDS):
            raise ValueError(f"{install} lacks {self.name}'s webhook configurations")
        return configurations

    def _serves(self, webhook: dict[str, Any]) -> bool:
        groups = {group for rule in webhook.get("rules", []) for group in rule.get("apiGroups", [])}
        return self.webhook_groups is None or bool(groups & set(self.webhook_groups))

    def manager_configuration(self, cert_dir: Path, addons: tuple[str, ...]) -> str:
        """The manager's --config: webhooks on 127.0.0.1 with our certificate, one instance, no metrics."""
        return json.dumps({
            **self.configuration(cert_dir, addons),
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port, "certDir": str(cert_dir)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
        }, indent=2)  # fmt: skip


def _documents(install: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(install.read_text()) if doc]
