"""The cluster's certificates and identities: one CA, the API server's serving certificate, and a
bearer token and kubeconfig per identity, with the users and groups a kubeadm cluster's
certificates would give them (RBAC and the Node authorizer see the same)."""

from __future__ import annotations

import secrets
from pathlib import Path

from toolchain.apiserver import certificates

from .network import API_PORT, KUBERNETES_SERVICE_IP, NODE_IP

COREDNS_USER = "ddp-infra:coredns"
KUBE_ROUTER_USER = "ddp-infra:kube-router"


def write_credentials(pki: Path, *, name: str, nodes: dict[str, str], domain: str, context: str,
                      addon_users: dict[str, str]) -> dict[str, str]:
    """Everything under `pki`; returns each identity's token (admin, each kubelet, each add-on, ...).
    `nodes`: {kubelet's key: node name}, a kubelet each, which the Node authorizer holds to its own
    node. The daemons of the nodes reach the API server on the control plane's address; those of
    the control plane on 127.0.0.1."""
    pki.mkdir()
    certificates.make_ca(pki, f"ddp-infra-{name}-ca", days=30)
    sans = [
        f"IP:{NODE_IP}", "IP:127.0.0.1", f"IP:{KUBERNETES_SERVICE_IP}", "DNS:localhost", "DNS:kubernetes",
        "DNS:kubernetes.default", "DNS:kubernetes.default.svc", f"DNS:kubernetes.default.svc.{domain}",
    ]  # fmt: skip
    certificates.sign_serving(pki, "apiserver", "kube-apiserver", sans, days=30)
    certificates.service_account_key(pki)
    identities = {
        "admin": ("ddp-infra:admin", "system:masters"),
        "kube-controller-manager": ("system:kube-controller-manager", ""),
        "kube-scheduler": ("system:kube-scheduler", ""),
        **{key: (f"system:node:{node}", "system:nodes") for key, node in nodes.items()},
        "kube-proxy": ("system:kube-proxy", ""),
        "coredns": (COREDNS_USER, ""),
        "kube-router": (KUBE_ROUTER_USER, ""),
        **{addon: (user, "") for addon, user in addon_users.items()},
    }
    tokens = {key: secrets.token_hex(16) for key in identities}
    certificates.token_file(pki / "tokens.csv", {tokens[key]: identity for key, identity in identities.items()})
    on_nodes = {*nodes, "kube-proxy", "kube-router"}
    for key in identities:
        server = NODE_IP if key in on_nodes else "127.0.0.1"
        certificates.write_kubeconfig(pki / f"{key}.kubeconfig", context, f"https://{server}:{API_PORT}", pki / "ca.crt", tokens[key])
    return tokens
