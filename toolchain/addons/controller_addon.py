"""A controller add-on of the local cluster (toolchain/cluster/): JobSet's, Kueue's.

The manager runs as a process inside the cluster's namespaces, like CoreDNS, rather than as the
Deployment of its own install: there is no registry to pull its image from, and as a process it
needs no Service, no cert-manager and no cert rotation. What it needs instead:

- its CRDs, and its ClusterRole bound to the user of its own kubeconfig (a token, as every other
  component here has);
- a serving certificate for its webhook server, signed by the cluster's CA with the address the
  API server calls it on (127.0.0.1 inside the namespace: both run there);
- its webhook configurations, taken from its module's manifests with `clientConfig.url` pointing
  at that address and the CA as `caBundle`, in place of the `service` a Deployment would sit behind
  (and the same for the conversion webhook of a CRD that serves two versions, as Kueue's do);
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

    def namespaced_role_binding(self, role: dict[str, Any]) -> dict[str, Any]:
        """Binds a Role of the install to its user, in the Role's namespace."""
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"ddp-infra:{role['metadata']['name']}", "namespace": role["metadata"]["namespace"]},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]},
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
    # Roles of the install in that namespace that the manager needs too (Kueue 0.19 watches its
    # namespace's Secrets, and waits for ever without that access).
    namespaced_roles: tuple[str, ...] = ()
    # Directories where the manager reads a certificate whatever its configuration says: the
    # webhook's certificate is bind-mounted there, inside the cluster's mount namespace.
    fixed_cert_dirs: tuple[str, ...] = field(default=())

    def install_manifests(self, manager_binary: str) -> Path:
        """The module's rendered install, beside the manager binary the toolchain's link points at."""
        return Path(manager_binary).resolve().parent / INSTALL_MANIFESTS

    def api_objects(self, install: Path, ca_pem: bytes | None = None) -> list[dict[str, Any]]:
        """The CRDs and the manager's access, before the manager starts. A CRD that serves several
        versions through the manager's conversion webhook calls it at 127.0.0.1 with the cluster's
        CA (`ca_pem`); without a CA (an API server with no manager behind it), and for a CRD of
        one version, the API server converts nothing but the apiVersion."""
        crds, roles, namespaced = [], [], []
        for doc in _documents(install):
            if doc["kind"] == "CustomResourceDefinition":
                conversion = doc["spec"].pop("conversion", None) or {}
                if conversion.get("strategy") == "Webhook" and ca_pem and len(doc["spec"]["versions"]) > 1:
                    webhook = conversion["webhook"]
                    webhook["clientConfig"] = self._client_config(webhook["clientConfig"], ca_pem)
                    doc["spec"]["conversion"] = conversion
                doc["metadata"].get("annotations", {}).pop("cert-manager.io/inject-ca-from", None)
                crds.append(doc)
            elif doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == self.cluster_role:
                roles.append(doc)
            elif doc["kind"] == "Role" and doc["metadata"]["name"] in self.namespaced_roles:
                namespaced += [doc, self.namespaced_role_binding(doc)]
        missing = sorted(set(self.crds) - {crd["metadata"]["name"] for crd in crds})
        missing += sorted(set(self.namespaced_roles) - {doc["metadata"]["name"] for doc in namespaced})
        if missing or len(roles) != 1:
            raise ValueError(f"{install} lacks {', '.join(missing) or 'no CRD'} or the {self.cluster_role} ClusterRole")
        namespace = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}] if self.namespace else []
        return [*namespace, *crds, *roles, self.role_binding(self.cluster_role), *namespaced]

    def webhook_configurations(self, install: Path, ca_pem: bytes) -> list[dict[str, Any]]:
        """The module's webhook configurations, calling the manager at 127.0.0.1 with the cluster's CA."""
        configurations = []
        for doc in _documents(install):
            if doc["kind"] in _WEBHOOK_KINDS:
                doc["webhooks"] = [webhook for webhook in doc["webhooks"] if self._serves(webhook)]
                for webhook in doc["webhooks"]:
                    webhook["clientConfig"] = self._client_config(webhook["clientConfig"], ca_pem)
                configurations.append(doc)
        if len(configurations) != len(_WEBHOOK_KINDS):
            raise ValueError(f"{install} lacks {self.name}'s webhook configurations")
        return configurations

    def _client_config(self, service_config: dict[str, Any], ca_pem: bytes) -> dict[str, Any]:
        """A webhook's clientConfig for the manager at 127.0.0.1, in place of the Service of its install."""
        path = service_config["service"]["path"]
        return {"url": f"https://127.0.0.1:{self.webhook_port}{path}", "caBundle": base64.b64encode(ca_pem).decode()}

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
