"""Before a stack that deploys to a cluster registers anything: can its cluster be reached?

The Kubernetes provider only warns when its cluster is unreachable. A preview then plans every
resource as a create and succeeds with nothing to say, and `pulumi up` fails on the first
object the provider must send, after the resources that need no cluster were created. This
check runs first: it finds the kubeconfig context the provider would use (`kubernetes.context`,
else the kubeconfig's current context), the API server that context names, and opens a TCP
connection to it. When any of that fails, the program stops before its first registration
with a message that names the context and what to do.

A stack that renders manifests (`kubernetes.renderDir`) needs no cluster and is not checked.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit

import pulumi
import yaml
from pulumi.runtime import mocks

from .config import KubernetesConfig
from .names import PROJECT

CONNECT_TIMEOUT_S = 5.0


class ClusterUnreachable(pulumi.RunError):
    """A RunError, so Pulumi reports the message alone, without a stack trace."""


def require_reachable_cluster(kubernetes: KubernetesConfig, stack: str) -> None:
    """Raise ClusterUnreachable unless the stack renders manifests or its cluster answers."""
    if needs_no_cluster(kubernetes):
        return
    problem = cluster_problem(kubernetes.context)
    if problem:
        raise ClusterUnreachable(
            f"the stack's Kubernetes cluster cannot be reached; nothing was created:\n  {problem}\n"
            "  to fix: start the cluster (or join its network), export KUBECONFIG=<a kubeconfig that reaches it>, "
            f"pick its context with `pulumi config set --path {PROJECT}:kubernetes.context <context>`, "
            f"or render manifests instead with `pulumi config set --path {PROJECT}:kubernetes.renderDir rendered/{stack}`"
        )


def needs_no_cluster(kubernetes: KubernetesConfig) -> bool:
    """A stack that renders manifests; or the program under Pulumi's mocks, where unit tests check it alone."""
    return bool(kubernetes.render_dir) or isinstance(pulumi.runtime.settings.get_monitor(), mocks.MockMonitor)


def kubeconfig_paths() -> list[Path]:
    """The files the provider (client-go) reads: $KUBECONFIG's list, else ~/.kube/config."""
    listed = [Path(p) for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return listed or [Path.home() / ".kube" / "config"]


def cluster_problem(context: Optional[str], timeout: float = CONNECT_TIMEOUT_S) -> Optional[str]:
    """Why the cluster of `context` (None: the current context) cannot be reached, or None."""
    paths = kubeconfig_paths()
    where = f"KUBECONFIG={os.pathsep.join(map(str, paths))}" if os.environ.get("KUBECONFIG") else f"{paths[0]}"
    try:
        merged = _merged([path for path in paths if path.is_file()])
    except (OSError, yaml.YAMLError, AttributeError) as error:
        return f"{where} cannot be read as a kubeconfig: {error}"
    if merged is None:
        return f"no kubeconfig: {where} does not exist"
    chosen = context or merged["current-context"]
    named = f"context '{chosen}' ({f'{PROJECT}:kubernetes.context' if context else 'the current context'})"
    if not chosen:
        return f"{where} sets no current-context and {PROJECT}:kubernetes.context is not set"
    if chosen not in merged["contexts"]:
        return f"{named} is not in {where}"
    cluster_name = (merged["contexts"][chosen] or {}).get("cluster")
    server = (merged["clusters"].get(cluster_name) or {}).get("server")
    if not server:
        return f"{named} in {where} names cluster '{cluster_name}', which has no server"
    url = urlsplit(server)
    try:
        host, port = url.hostname, url.port or (80 if url.scheme == "http" else 443)
    except ValueError as error:
        return f"{named} in {where}: server {server} is not a URL ({error})"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as error:
        return f"{named} in {where}: its API server {server} does not answer ({error.strerror or error})"


def _merged(paths: list[Path]) -> Optional[dict[str, Any]]:
    """client-go's merge of several kubeconfigs: the first file to name a context or cluster wins."""
    if not paths:
        return None
    merged: dict[str, Any] = {"current-context": "", "contexts": {}, "clusters": {}}
    for path in paths:
        document = yaml.safe_load(path.read_text()) or {}
        merged["current-context"] = merged["current-context"] or document.get("current-context") or ""
        for kind in ("contexts", "clusters"):
            for entry in document.get(kind) or []:
                merged[kind].setdefault(entry.get("name"), entry.get(kind[:-1]))
    return merged
