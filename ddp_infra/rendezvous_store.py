"""The c10d rendezvous store in a pod of its own (`rendezvous.store: own-pod`, the default), as
plain Kubernetes dicts.

torchrun keeps the rendezvous in a TCPStore. On pod 0's torchrun (`pod-0`), the store dies with
pod 0: every other pod's torchrun fails, and the world forms again only once pod 0's replacement
has started, imported torch and listens. Here it is a Deployment of one pod running
`contract.RENDEZVOUS_STORE_COMMAND` (trainer/pod/rendezvous_store.py) from the training image, behind
a Service whose address stays when the pod is replaced: losing any training pod is then one
member gone from a rendezvous that goes on. If the store's pod is lost, every pod's torchrun fails
and the pods re-join once the Deployment's new pod listens, as they do for pod 0 under `pod-0`.

The pod asks for memory only (an idle TCPStore beside an imported torch): a CPU request could keep
a world that fills its nodes' CPUs from fitting. It runs on the nodes the world may use, as the
same non-root user, and only the world's pods may reach it (its own NetworkPolicy). Its labels
are not the world's, so that the world's Service, disruption budget and policy do not count it.
"""

from __future__ import annotations

from typing import Any

from trainer import contract

from .manifests import object_metadata
from .names import RENDEZVOUS_PORT_NAME, WAIT_FOR_ANNOTATION
from .pod import (
    container_security_context, image_pull_secrets, node_placement, rendezvous_container_port, shared_pod_spec, training_image,
)  # fmt: skip
from .world import World

COMPONENT = "rendezvous-store"
CONTAINER = "store"
# What `pulumi up` waits for: the Deployment's controller has taken it, and the Service has its
# cluster IP, not the pod Ready. The provider's own awaits (the rollout; a Service's endpoints)
# would hold `up` for 10 minutes on a store that cannot start (an image the node cannot pull),
# where the world's pods say why they wait for it.
ACCEPTED = "jsonpath={.status.observedGeneration}"
ADDRESSED = "jsonpath={.spec.clusterIP}"
# Measured: 528 MiB of RSS, nearly all of it torch's libraries (torch 2.15, an idle store).
MEMORY_REQUEST, MEMORY_LIMIT = "640Mi", "1Gi"


def _metadata(world: World, component: str, wait_for: str | None = None) -> dict[str, Any]:
    metadata = object_metadata(world, world.rendezvous_store_name, component, world.rendezvous_store_selector)
    if wait_for:
        metadata["annotations"] = {**metadata.get("annotations", {}), WAIT_FOR_ANNOTATION: wait_for}
    return metadata


def deployment_manifest(world: World) -> dict[str, Any]:
    config = world.config
    container = {
        "name": CONTAINER,
        **training_image(config),
        "command": [*contract.RENDEZVOUS_STORE_COMMAND, str(world.rendezvous_port)],
        "ports": [rendezvous_container_port(world)],
        "resources": {"requests": {"memory": MEMORY_REQUEST}, "limits": {"memory": MEMORY_LIMIT}},
        "securityContext": container_security_context(config),
    }
    pod_spec = {
        **shared_pod_spec(world, [container], termination_grace_period_seconds=5),  # it keeps nothing worth a wait
        **node_placement(config),
        **image_pull_secrets(config),
    }
    # the pod's labels and annotations are the Deployment's own, less its wait
    template_metadata = {key: value for key, value in _metadata(world, COMPONENT).items() if key in ("labels", "annotations")}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(world, COMPONENT, ACCEPTED),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # never two stores: a pod could join the wrong one
            "selector": {"matchLabels": world.rendezvous_store_selector},
            "template": {"metadata": template_metadata, "spec": pod_spec},
        },
    }


def service_manifest(world: World) -> dict[str, Any]:
    """A cluster IP, which stays the store's address when its pod is replaced."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(world, COMPONENT, ADDRESSED),
        "spec": {
            "selector": world.rendezvous_store_selector,
            "ports": [{"name": RENDEZVOUS_PORT_NAME, "port": world.rendezvous_port,
                       "targetPort": world.rendezvous_port, "protocol": "TCP"}],  # fmt: skip
        },
    }


def network_policy_manifest(world: World) -> dict[str, Any]:
    """Ingress to the store only from the world's pods, on its port."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(world, "network-policy"),
        "spec": {
            "podSelector": {"matchLabels": world.rendezvous_store_selector},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [{"podSelector": {"matchLabels": world.selector}}],
                "ports": [{"port": world.rendezvous_port, "protocol": "TCP"}],
            }],
        },
    }
