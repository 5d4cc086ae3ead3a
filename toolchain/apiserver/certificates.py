"""Certificates, bearer tokens and kubeconfigs of a local API server, made with openssl: one CA
per server, serving certificates it signs, and a kubeconfig per identity. Shared by the test API
server (toolchain/apiserver/server.py) and the local cluster (toolchain/cluster/)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path


def openssl(pki: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=pki, check=True, capture_output=True)


def make_ca(pki: Path, common_name: str, days: int) -> Path:
    """ca.key and ca.crt in `pki`; returns the certificate, which clients trust."""
    openssl(pki, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(days), "-keyout", "ca.key",
            "-out", "ca.crt", "-subj", f"/CN={common_name}")  # fmt: skip
    return pki / "ca.crt"


def sign_serving(pki: Path, name: str, common_name: str, sans: list[str], days: int,
                 key: Path | None = None, cert: Path | None = None) -> tuple[Path, Path]:
    """A serving key and certificate for `sans` (IP:..., DNS:...), signed by the CA in `pki`;
    `<name>.key` and `<name>.crt` in `pki` unless `key` and `cert` say where."""
    key, cert = key or pki / f"{name}.key", cert or pki / f"{name}.crt"
    (pki / f"{name}.ext").write_text(f"subjectAltName={','.join(sans)}\nextendedKeyUsage=serverAuth\n")
    openssl(pki, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", f"{name}.csr", "-subj", f"/CN={common_name}")
    openssl(pki, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", str(days), "-out", str(cert), "-extfile", f"{name}.ext")  # fmt: skip
    return key, cert


def service_account_key(pki: Path) -> Path:
    openssl(pki, "genrsa", "-out", "service-account.key", "2048")
    return pki / "service-account.key"


def token_file(path: Path, users: dict[str, tuple[str, str]]) -> Path:
    """The API server's --token-auth-file: each bearer token with its user and group."""
    path.write_text("".join(f'{token},{user},{user},"{group}"\n' for token, (user, group) in users.items()))
    return path


def write_kubeconfig(path: Path, context: str, server: str, ca_file: Path, token: str) -> None:
    # JSON is YAML: kubectl, client-go and the Pulumi provider read it as a kubeconfig.
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": context, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
    }  # fmt: skip
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
