"""A claim change Kubernetes cannot make in place (its storage class, its access mode, a shrink)
is refused before anything is registered, against what the stack's last deployment recorded in
its `claims` output. Growing a claim, renaming it (a new claim) or a first deployment goes through."""

from __future__ import annotations

import pytest

import infra_harness as harness
from ddp_infra import claim_changes
from ddp_infra.config import StorageConfig

KEY = "ddp-infra:storage.outputs"


def _redeployed(previous: harness.Evaluation, **changes) -> harness.Evaluation:
    """The dev stack with `changes`, evaluated as the engine would after `previous` was deployed."""
    return harness.evaluate(harness.stack_config_with("dev", **changes), previous_outputs=previous.outputs)


@pytest.fixture(scope="module")
def deployed() -> harness.Evaluation:
    return harness.evaluated_with("dev", storage__outputs__storageClass="standard")


@pytest.mark.parametrize(
    ("changes", "field", "was", "now"),
    [
        ({"storage__outputs__storageClass": "fast"}, "storageClass", "'standard'", "'fast'"),
        ({"storage__outputs__storageClass": harness.DELETE}, "storageClass", "'standard'", "(not set"),
        ({"storage__outputs__accessMode": "ReadWriteMany"}, "accessMode", "'ReadWriteOnce'", "'ReadWriteMany'"),
        ({"storage__outputs__size": "4Gi"}, "size", "'5Gi'", "'4Gi'"),
    ],
    ids=["class", "class-unset", "access-mode", "shrink"],
)
def test_a_change_that_would_replace_or_shrink_a_claim_is_refused_before_anything_is_registered(
    deployed, changes, field, was, now
):
    evaluation = _redeployed(deployed, **{"storage__outputs__storageClass": "standard", **changes})
    message = str(evaluation.error)
    assert f"{KEY}.{field}" in message and was in message and now in message, message
    assert "ddp-dev/outputs-pvc" in message, message
    assert "nothing was changed" in message, message
    assert "claimName" in message, message  # what to do instead: a new claim under another name
    registered_kinds = {r.manifest["kind"] for r in evaluation.registered if r.type.startswith("kubernetes:")}
    assert not registered_kinds & {"PersistentVolumeClaim", "Job", "StatefulSet"}, registered_kinds


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"storage__outputs__size": "50Gi"},
        {"storage__outputs__claimName": "outputs-v2", "storage__outputs__storageClass": "fast"},
        {"nodes": "3", "storage__datasets__size": "6Gi"},
    ],
    ids=["unchanged", "grow", "renamed-claim", "other-changes"],
)
def test_changes_kubernetes_makes_in_place_or_new_claims_go_through(deployed, changes):
    evaluation = _redeployed(deployed, **{"storage__outputs__storageClass": "standard", **changes})
    assert evaluation.error is None, str(evaluation.error)
    assert evaluation.of_type("kubernetes:core/v1:PersistentVolumeClaim")


def test_a_first_deployment_has_nothing_to_compare_with():
    evaluation = harness.evaluate(harness.stack_config_with("dev", storage__outputs__storageClass="fast"),
                                  previous_outputs={})  # fmt: skip
    assert evaluation.error is None, str(evaluation.error)


def test_the_recorded_claims_are_those_the_stack_creates(deployed):
    recorded = deployed.outputs[claim_changes.CLAIMS_OUTPUT]
    assert set(recorded) == {"datasets", "outputs"}  # the dev stack mounts no models claim
    assert recorded["outputs"] == {
        "claim": "ddp-dev/outputs-pvc", "storageClass": "standard", "accessMode": "ReadWriteOnce", "size": "5Gi",
    }  # fmt: skip
    existing = harness.evaluated_with("dev", storage__datasets={"create": False, "claimName": "shared-data"})
    assert set(existing.outputs[claim_changes.CLAIMS_OUTPUT]) == {"outputs"}  # a mounted claim is not the stack's


def test_problems_compare_quantities_not_spellings():
    storage = StorageConfig.model_validate({"outputs": {"size": "1024Mi"}})
    recorded = claim_changes.recorded_claims(storage, "ns")
    assert claim_changes.claim_change_problems({**recorded, "outputs": {**recorded["outputs"], "size": "1Gi"}}, recorded) == []
    assert claim_changes.claim_change_problems({**recorded, "outputs": {**recorded["outputs"], "size": "2Gi"}}, recorded)
