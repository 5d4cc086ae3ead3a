"""Before a stack that deploys to a cluster registers anything: may its credentials do what it does?

Credentials that expired, or a user without the rights, show only at `pulumi up`, on the first
object the provider sends: the objects before it are created, the rest are not, and the stack is
left half made. Here the program asks the API server first, in one kubectl call: a
SelfSubjectAccessReview for each kind the stack registers and each verb the provider uses on it
(get to read it back, create, patch to update it, delete to replace it), in the stack's namespace.
Any refusal stops `pulumi preview` and `pulumi up` with every refusal named, before anything is
created; so do credentials the API server rejects (Unauthorized). A review that cannot be sent or
read otherwise gets a warning.

A stack that renders manifests, or runs under Pulumi's mocks, is not checked.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Any

import pulumi

from observe.kubectl import Kubectl

from . import gang
from .names import PROJECT
from .reachability import needs_no_cluster
from .workload import workload_manifest
from .world import World

KUBECTL_TIMEOUT_S = 30
VERBS = ("get", "create", "patch", "delete")


@dataclass(frozen=True)
class Resource:
    """A kind as authorization names it: its API group ("" for the core group) and resource."""

    group: str
    resource: str
    namespaced: bool = True

    def __str__(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource


# Each kind the program registers (ddp_infra.manifests, workload, rendezvous_store, gang).
RESOURCES = {
    "Namespace": Resource("", "namespaces", namespaced=False),
    "PersistentVolumeClaim": Resource("", "persistentvolumeclaims"),
    "Secret": Resource("", "secrets"),
    "Service": Resource("", "services"),
    "ServiceAccount": Resource("", "serviceaccounts"),
    "NetworkPolicy": Resource("networking.k8s.io", "networkpolicies"),
    "PodDisruptionBudget": Resource("policy", "poddisruptionbudgets"),
    "Deployment": Resource("apps", "deployments"),
    "StatefulSet": Resource("apps", "statefulsets"),
    "Job": Resource("batch", "jobs"),
    "JobSet": Resource("jobset.x-k8s.io", "jobsets"),
    "PodGroup": Resource("scheduling.volcano.sh", "podgroups"),
    "Workload": Resource("scheduling.k8s.io", "workloads"),
}


class AccessRefused(pulumi.RunError):
    """A RunError, so Pulumi reports the message alone, without a stack trace."""


def registered_kinds(world: World, template: dict[str, Any]) -> list[str]:
    """The kinds of the objects the stack registers for this world and pod template
    (ddp_infra.components.stack)."""
    config = world.config
    kinds = ["Namespace"] if config.namespace.create else []
    kinds += ["PersistentVolumeClaim", "Service", "ServiceAccount", "NetworkPolicy", "PodDisruptionBudget"]
    if config.hf_token is not None or config.secret_env:
        kinds.append("Secret")
    if world.has_rendezvous_store:
        kinds.append("Deployment")
    if gang.uses(world, "volcano"):
        kinds.append("PodGroup")
    if gang.writes_workload(world):
        kinds.append("Workload")
    return kinds + [workload_manifest(world, template)["kind"]]


def reviews(kinds: list[str], namespace: str) -> dict[str, Any]:
    """One SelfSubjectAccessReview per kind and verb, as a List kubectl creates in one call."""
    items = []
    for kind in kinds:
        resource = RESOURCES[kind]
        for verb in VERBS:
            attributes = {"group": resource.group, "resource": resource.resource, "verb": verb}
            if resource.namespaced:
                attributes["namespace"] = namespace
            items.append({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": attributes}})
    return {"apiVersion": "v1", "kind": "List", "items": items}


def refusals(answers: list[dict[str, Any]]) -> list[str]:
    """What the reviews' answers refuse, a line per resource: its verbs, where, and the server's reason."""
    refused: dict[tuple[str, str], tuple[list[str], str]] = {}  # (resource, where): (verbs, the server's reason)
    for answer in answers:
        status = answer.get("status", {})
        if status.get("allowed"):
            continue
        attributes = answer["spec"]["resourceAttributes"]
        resource = str(Resource(attributes.get("group", ""), attributes["resource"]))
        where = f"in namespace {attributes['namespace']}" if attributes.get("namespace") else "(cluster-wide)"
        verbs, reason = refused.get((resource, where), ([], ""))
        refused[(resource, where)] = ([*verbs, attributes["verb"]], status.get("reason") or reason)
    return [f"may not {', '.join(verbs)} {resource} {where}" + (f" ({reason})" if reason else "")
            for (resource, where), (verbs, reason) in refused.items()]  # fmt: skip


def ask(kubectl: Kubectl, request: dict[str, Any]) -> list[dict[str, Any]]:
    """The API server's answers to the reviews. Raises PermissionError when it rejects the
    credentials themselves, RuntimeError when kubectl fails otherwise."""
    # --validate=false: no schema download for reviews the program wrote itself (one round trip less)
    args = ("create", "--validate=false", "-f", "-", "-o", "json")
    done = kubectl.run(*args, check=False, input=json.dumps(request))
    if done.returncode != 0:
        error = done.stderr.strip()
        rejected = "Unauthorized" in error or "provide credentials" in error
        raise (PermissionError if rejected else RuntimeError)(f"`{' '.join(kubectl.argv(*args))}` failed: {error}")
    return json_documents(done.stdout)


def json_documents(text: str) -> list[dict[str, Any]]:
    """kubectl's `-o json` of the objects of a List it created: one document after another."""
    decoder, documents, at = json.JSONDecoder(), [], 0
    while (at := len(text) - len(text[at:].lstrip())) < len(text):
        document, at = decoder.raw_decode(text, at)
        documents.append(document)
    return documents


def require_access(world: World, template: dict[str, Any]) -> None:
    """Raise AccessRefused, naming every refusal, when the stack's credentials may not do what the
    stack does in its cluster; see the module's docstring. `template`: the world's pod template."""
    kubernetes = world.config.kubernetes
    if needs_no_cluster(kubernetes):
        return
    whose = f"context '{kubernetes.context}' ({PROJECT}:kubernetes.context)" if kubernetes.context else "the kubeconfig's current context"
    try:
        kubectl = Kubectl(world.namespace, kubernetes.context, timeout=KUBECTL_TIMEOUT_S)
        refused = refusals(ask(kubectl, reviews(registered_kinds(world, template), world.namespace)))
    except PermissionError as error:
        refused = [f"its credentials are rejected by the API server (expired or revoked?): {error}"]
    except (OSError, RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as error:
        pulumi.log.warn(f"whether {whose} may create the stack's objects is not checked: {error}")
        return
    if refused:
        raise AccessRefused(f"{whose} may not do what the stack does; nothing was created:\n  " + "\n  ".join(refused)
                            + "\n  to fix: log in again (a token that expired), have the cluster's admin grant these "
                            f"(a Role in the namespace, a ClusterRole for namespaces), or pick other credentials with "
                            f"`pulumi config set --path {PROJECT}:kubernetes.context <context>`")  # fmt: skip
