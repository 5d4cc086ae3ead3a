"""The world's other objects, as plain Kubernetes dicts: namespace, claims, rendezvous Service,
NetworkPolicy, PodDisruptionBudget, ServiceAccount, the token Secret and the secret env's Secret.

Pure functions, no Pulumi. A claim is built from its storage config and the namespace only,
so nothing about the workload (nodes, image, resources, ...) can ever change a claim.
"""

from __future__ import annotations

from typing import Any, Optional

from .config import NamespaceConfig, VolumeConfig
from .pod_security import PRIVILEGED
from .names import CONTAINER_NAME, HF_TOKEN_SECRET_KEY, OWNERSHIP_LABELS, RENDEZVOUS_PORT_NAME, WAIT_FOR_ANNOTATION
from .world import World

# A claim is ready for `pulumi up` once the API server has given it a phase. The provider's own
# check waits for Pending under a WaitForFirstConsumer class when it creates a claim, and a claim
# it adopts after `pulumi destroy` (server-side apply) is a create of a claim already Bound:
# that wait never ends, and `up` failed after 5 minutes (seen on the local cluster).
CLAIM_READY = "jsonpath={.status.phase}"


def namespace_manifest(namespace: NamespaceConfig, pod_security: str) -> dict[str, Any]:
    """`pod_security` is the strictest Pod Security Standard the pods meet (ddp_infra.pod_security):
    enforcing it keeps it that way, and a workload object that would break it is warned about
    when it is applied, not only when its pods are refused."""
    labels = dict(OWNERSHIP_LABELS)
    if pod_security != PRIVILEGED:
        labels["pod-security.kubernetes.io/enforce"] = pod_security
        labels["pod-security.kubernetes.io/warn"] = pod_security
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace.name, "labels": labels}}


def claim_manifest(role: str, volume: VolumeConfig, namespace: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": [volume.access_mode],
        "resources": {"requests": {"storage": volume.size}},
    }
    if volume.storage_class:
        spec["storageClassName"] = volume.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": volume.claim_name,
            "namespace": namespace,
            "labels": World.storage_labels(role),
            "annotations": {WAIT_FOR_ANNOTATION: CLAIM_READY},
        },
        "spec": spec,
    }


def object_metadata(world: World, name: str, component: str, selector: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """An object of the world's: its name, namespace, labels (`selector` in place of the world's,
    as World.labels takes it) and the stack's annotations."""
    metadata: dict[str, Any] = {"name": name, "namespace": world.namespace, "labels": world.labels(component, selector)}
    if world.extra_annotations:
        metadata["annotations"] = dict(world.extra_annotations)
    return metadata


def rendezvous_service_manifest(world: World) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(world, world.service_name, "rendezvous"),
        "spec": {
            "clusterIP": "None",
            # Pod DNS must exist before pods are Ready, or rendezvous waits on itself.
            "publishNotReadyAddresses": True,
            "selector": world.selector,
            "ports": [{
                "name": RENDEZVOUS_PORT_NAME,
                "port": world.rendezvous_port,
                "targetPort": world.rendezvous_port,
                "protocol": "TCP",
            }],
        },
    }


def network_policy_manifest(world: World) -> dict[str, Any]:
    """Ingress to the world's pods only from the world's pods, on any port (NCCL picks its own)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_metadata(world, world.network_policy_name, "network-policy"),
        "spec": {
            "podSelector": {"matchLabels": world.selector},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": world.selector}}]}],
        },
    }


def disruption_budget_manifest(world: World) -> dict[str, Any]:
    """How many healthy pods a voluntary disruption (a node drain) may evict at once
    (`workload.maxUnavailable`).

    Each eviction stops the whole world at a SIGTERM checkpoint, and it re-forms when the pod is
    back: one at a time lets a drain proceed without gaining anything from more; 0 makes a drain
    wait until the run ends. A pod that is not Ready (crash-looping, stuck) trains nothing, and
    under the default policy it could never be evicted, blocking every drain and node-pool
    upgrade: AlwaysAllow.

    Written as minAvailable: a budget with maxUnavailable needs a controller with a scale
    subresource, which a Job lacks, and then never allows an eviction (seen on the local cluster).
    """
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_metadata(world, world.disruption_budget_name, "disruption-budget"),
        "spec": {
            "minAvailable": disruption_budget_min_available(world),
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "selector": {"matchLabels": world.selector},
        },
    }


def disruption_budget_min_available(world: World) -> int:
    """A fixed world may lose workload.maxUnavailable pods at once (it stops at a checkpoint and
    re-forms whole, with a spare where it has one); an elastic one as many, and never so many that
    it falls below its minimum, where it would stop training instead of going on smaller."""
    lowest = world.min_nodes if world.elastic else 0
    return max(lowest, world.pods - world.config.workload.max_unavailable)


def service_account_manifest(world: World) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_metadata(world, world.service_account_name, CONTAINER_NAME),
        "automountServiceAccountToken": False,  # training needs no Kubernetes API access
    }


def hf_token_secret_manifest(world: World, token: Any) -> dict[str, Any]:
    """`token` is the secret Output, placed as it is: its value never passes through here."""
    assert world.hf_token_secret_name, "no token configured"
    return _opaque_secret(world, world.hf_token_secret_name, "hf-token", {HF_TOKEN_SECRET_KEY: token})


def env_secret_manifest(world: World, values: dict[str, Any]) -> dict[str, Any]:
    """`values` are secret Outputs by env var name, placed as they are; each name is also its key."""
    return _opaque_secret(world, world.env_secret_name, "secret-env", dict(values))


def _opaque_secret(world: World, name: str, component: str, string_data: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_metadata(world, name, component),
        "type": "Opaque",
        "stringData": string_data,
    }
