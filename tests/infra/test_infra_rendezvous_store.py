"""The c10d rendezvous store's own pod (`rendezvous.store`), under mocks: what is registered, what
the pod may do and who may reach it."""

from __future__ import annotations

import pytest

from ddp_infra.names import RENDEZVOUS_PORT_NAME
from ddp_infra.pod_security import RESTRICTED, pod_security_level
from infra_harness import evaluate, evaluated, evaluated_with, stack_config_with

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SERVICE = "kubernetes:core/v1:Service"
POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
STORE_OBJECTS = {(DEPLOYMENT, "ddp-rendezvous-store"), (SERVICE, "ddp-rendezvous-store"), (POLICY, "ddp-rendezvous-store-netpol")}


def store_objects(evaluation) -> set[tuple[str, str]]:
    return {(r.type, r.name) for r in evaluation.registered if r.name.startswith("ddp-rendezvous-store") and r.type.startswith("kubernetes:")}


@pytest.mark.parametrize("stack", ["dev", "prod"])
@pytest.mark.parametrize("kind", ["job", "statefulset", "jobset"])
def test_by_default_the_store_has_a_pod_service_and_policy_of_its_own(stack, kind):
    evaluation = evaluated(stack, 4, kind)
    assert store_objects(evaluation) == STORE_OBJECTS
    workload = evaluation.workload.manifest["metadata"]["name"]
    names = {evaluation.named(type_, name).manifest["metadata"]["name"] for type_, name in STORE_OBJECTS}
    assert names == {f"{workload}-rdzv-store"}
    port = evaluation.named(SERVICE, "ddp-rendezvous-store").manifest["spec"]["ports"][0]["port"]
    assert evaluation.outputs["rendezvousEndpoint"] == f"{workload}-rdzv-store:{port}"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_store_pod_is_restricted_asks_no_cpu_and_runs_as_and_where_the_world_does(stack):
    evaluation = evaluated(stack, 4)
    deployment = evaluation.named(DEPLOYMENT, "ddp-rendezvous-store").manifest
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # never two stores at once
    spec = deployment["spec"]["template"]["spec"]
    assert pod_security_level(spec) == RESTRICTED
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    for key in ("image", "imagePullPolicy", "securityContext"):
        assert container[key] == evaluation.container[key], key
    assert container["ports"] == [port for port in evaluation.container["ports"] if port["name"] == RENDEZVOUS_PORT_NAME]
    assert "cpu" not in container["resources"]["requests"] and container["resources"]["requests"]["memory"]
    world = evaluation.pod_spec
    shared = (
        "serviceAccountName", "enableServiceLinks", "securityContext",
        "nodeSelector", "tolerations", "priorityClassName", "imagePullSecrets",
    )  # fmt: skip
    for key in shared:
        assert spec.get(key) == world.get(key), key
    assert "nvidia.com/gpu" not in container["resources"]["limits"]


def test_only_the_worlds_pods_may_reach_the_store_and_only_on_its_port():
    evaluation = evaluated("dev", 2)
    policy = evaluation.named(POLICY, "ddp-rendezvous-store-netpol").manifest["spec"]
    store_pod = evaluation.named(DEPLOYMENT, "ddp-rendezvous-store").manifest["spec"]["template"]
    world_labels = evaluation.pod_template["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= store_pod["metadata"]["labels"].items()
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"} and peer["podSelector"]["matchLabels"].items() <= world_labels.items()
    port = evaluation.named(SERVICE, "ddp-rendezvous-store").manifest["spec"]["ports"][0]["port"]
    assert rule["ports"] == [{"port": port, "protocol": "TCP"}]


def test_with_the_store_on_pod_0_there_is_no_store_pod_and_the_endpoint_is_pod_0():
    evaluation = evaluated_with("dev", rendezvous__store="pod-0")
    assert store_objects(evaluation) == set()
    assert evaluation.outputs["rendezvousEndpoint"].startswith(evaluation.outputs["masterAddress"] + ":")


def test_etcd_keeps_its_own_store():
    evaluation = evaluated_with("dev", rendezvous__backend="etcd-v2", rendezvous__endpoint="etcd.infra:2379")
    assert store_objects(evaluation) == set()
    assert evaluation.outputs["rendezvousEndpoint"] == "etcd.infra:2379"


@pytest.mark.parametrize("backend, extra", [("static", {}), ("etcd-v2", {"rendezvous__endpoint": "etcd.infra:2379"})])
def test_a_store_placement_for_another_backend_is_refused_before_anything_is_registered(backend, extra):
    evaluation = evaluate(stack_config_with("dev", rendezvous__backend=backend, rendezvous__store="own-pod", **extra))
    message = str(evaluation.error)
    assert "rendezvous.store" in message and "'own-pod'" in message and "unset unless backend is c10d" in message
    assert evaluation.registered == []


def test_up_waits_for_the_stores_controller_and_address_not_for_its_pod():
    """A store whose pod cannot start (an image the node cannot pull) must not hold `pulumi up` for
    the provider's 10-minute awaits (a Deployment's rollout, a Service's endpoints): the world's
    pods say why they wait for it."""
    evaluation = evaluated("dev", 2)
    for type_, condition in ((DEPLOYMENT, "jsonpath={.status.observedGeneration}"), (SERVICE, "jsonpath={.spec.clusterIP}")):
        assert evaluation.named(type_, "ddp-rendezvous-store").manifest["metadata"]["annotations"]["pulumi.com/waitFor"] == condition
