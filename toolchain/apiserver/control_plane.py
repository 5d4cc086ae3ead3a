"""The command lines of etcd and kube-apiserver, the API server's readiness and a GET on it, as the test API
server (toolchain/apiserver/server.py) and the local cluster (toolchain/cluster/) both start them."""

from __future__ import annotations

import functools
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

# The Kubernetes scheduler's gang scheduling (`scheduling.gang.scheduler: kubernetes`), beta in
# Kubernetes 1.37 and still off by default: the feature gates of every control-plane component, and
# the API server serving the Workload API (ddp_infra/cluster_apis.py). A cluster that asks for them
# (LocalCluster's workload_api): with WorkloadWithJob, the Job controller makes the PodGroup of a
# Job that asks for one (ddp_infra/gang.py); 1.37 has no GangScheduling gate (GenericWorkload turns
# the scheduler's gang plugin on).
WORKLOAD_API_GATES = ["--feature-gates", "GenericWorkload=true,WorkloadWithJob=true"]
WORKLOAD_API_FLAGS = [*WORKLOAD_API_GATES, "--runtime-config", "scheduling.k8s.io/v1beta1=true"]
# The release before (1.36: toolchain/build.sh's previous_apiserver_version, built as
# kube-apiserver-<version>), its API server alone: the Workload API in alpha, as scheduling.k8s.io/v1alpha2.
PREVIOUS_APISERVER_PREFIX = "kube-apiserver-"
PREVIOUS_WORKLOAD_API_FLAGS = ["--feature-gates", "GenericWorkload=true", "--runtime-config", "scheduling.k8s.io/v1alpha2=true"]


def etcd_argv(binary: str, data_dir: Path, client_port: int, peer_port: int) -> list[str]:
    client, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    return [
        binary, "--name", "default", "--data-dir", str(data_dir),
        "--listen-client-urls", client, "--advertise-client-urls", client,
        "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", f"default={peer}",
        # a local store is thrown away at stop: no need to wait for the disk
        "--unsafe-no-fsync", "--log-level", "warn",
    ]  # fmt: skip


def apiserver_argv(binary: str, *, etcd_url: str, bind: str, advertise: str, port: int, cert: Path, key: Path,
                   tokens: Path, service_account_key: Path, issuer: str, service_cidr: str, extra: list[str]) -> list[str]:
    """kube-apiserver serving `cert` on bind:port, with bearer tokens; `extra` says how it authorizes and admits."""
    return [
        binary, "--etcd-servers", etcd_url,
        "--bind-address", bind, "--advertise-address", advertise, "--secure-port", str(port),
        "--tls-cert-file", str(cert), "--tls-private-key-file", str(key),
        "--token-auth-file", str(tokens),
        "--service-account-issuer", issuer,
        "--service-account-key-file", str(service_account_key),
        "--service-account-signing-key-file", str(service_account_key),
        "--service-cluster-ip-range", service_cidr,
        "--profiling=false",
        *extra,
    ]  # fmt: skip


def ready(server: str, ca_file: Path, token: str) -> bool:
    """The API server's /readyz answers 200; an error status is not yet (a refused connection raises)."""
    return read(server, ca_file, token, "/readyz", timeout=5)[0] == 200


@functools.cache
def _tls(ca_pem: str) -> ssl.SSLContext:
    """One context a CA (a cluster started again at the same path has a new one)."""
    return ssl.create_default_context(cadata=ca_pem)


def read(server: str, ca_file: Path, token: str, path: str, timeout: float = 60, **query: str) -> tuple[int, bytes]:
    """A GET of `path` (with `query`) as the bearer of `token`: the status and the body, an error
    status included (a refused connection raises)."""
    url = f"{server}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, context=_tls(ca_file.read_text()), timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()
