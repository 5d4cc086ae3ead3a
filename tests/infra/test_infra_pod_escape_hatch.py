"""The escape hatch (`pod.*`): a runtime class, extra volumes and mounts, init containers,
sidecars, a writable root filesystem, and a strategic-merge patch of the pod template for the
rest, each reaching the pods, none touching what the program owns."""

from __future__ import annotations

import pulumi
import pytest

import infra_harness as harness
from ddp_infra.strategic_merge import strategic_merge
from trainer import contract

NAMESPACE = "kubernetes:core/v1:Namespace"
SHIPPER = {"name": "log-shipper", "image": "fluent/fluent-bit:3.2", "volumeMounts": [{"name": "logs", "mountPath": "/logs"}]}
FETCH = {"name": "fetch-weights", "image": "gcr.io/google.com/cloudsdktool/google-cloud-cli:slim",
         "command": ["gcloud", "storage", "cp", "-r", "gs://models/llm", "/models"]}  # fmt: skip
EVERYTHING = {
    "runtimeClassName": "nvidia",
    "volumes": [{"name": "logs", "emptyDir": {}}, {"name": "gcs-key", "secret": {"secretName": "gcs-key"}}],
    "volumeMounts": [{"name": "logs", "mountPath": "/var/log/trainer"}, {"name": "gcs-key", "mountPath": "/etc/gcs", "readOnly": True}],
    "initContainers": [FETCH],
    "sidecars": [SHIPPER],
    "readOnlyRootFilesystem": False,
    "templatePatch": {
        "metadata": {"annotations": {"fluentbit.io/parser": "json"}},
        "spec": {
            "dnsConfig": {"options": [{"name": "ndots", "value": "2"}]},
            "containers": [{"name": "trainer", "lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}}}}],
        },
    },
}


@pytest.mark.parametrize("kind", contract.WORKLOAD_KINDS)
@pulumi.runtime.test
def test_everything_reaches_the_pods_and_stays_valid_kubernetes(kind):
    evaluation = harness.evaluated_with("prod", pod=EVERYTHING, workload__kind=kind)
    template = evaluation.pod_template
    spec, trainer = template["spec"], evaluation.container
    assert spec["runtimeClassName"] == "nvidia"
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert volumes["logs"] == {"name": "logs", "emptyDir": {}} and volumes["gcs-key"]["secret"] == {"secretName": "gcs-key"}
    assert {"datasets", "outputs", "models", "dshm", "tmp"} <= volumes.keys(), "the program's volumes are kept"
    mounts = {mount["mountPath"]: mount for mount in trainer["volumeMounts"]}
    assert mounts["/var/log/trainer"]["name"] == "logs" and mounts["/etc/gcs"]["readOnly"] is True
    assert {contract.DATA_MOUNT, contract.OUT_MOUNT, contract.SHM_MOUNT, "/tmp"} <= mounts.keys()
    # init containers first, then the sidecars, which restart with the pod and do not hold a Job open
    fetch, shipper = spec["initContainers"]
    assert fetch["name"] == "fetch-weights" and "restartPolicy" not in fetch
    assert shipper["name"] == "log-shipper" and shipper["restartPolicy"] == "Always"
    for extra in (fetch, shipper):
        assert extra["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert trainer["securityContext"]["readOnlyRootFilesystem"] is False
    # the patch merged in: new fields added, the trainer's own kept
    assert spec["dnsConfig"] == {"options": [{"name": "ndots", "value": "2"}]}
    assert trainer["lifecycle"] == {"preStop": {"exec": {"command": ["sleep", "5"]}}}
    assert trainer["command"] == list(contract.ENTRYPOINT_COMMAND) and trainer["env"] == harness.evaluated("prod", 8, kind).container["env"]
    assert template["metadata"]["annotations"]["fluentbit.io/parser"] == "json"
    assert template["metadata"]["labels"] == harness.evaluated("prod", 8, kind).pod_template["metadata"]["labels"]
    for manifest in evaluation.kubernetes_manifests:
        harness.validate_manifest(manifest)


@pulumi.runtime.test
def test_the_escape_hatch_keeps_the_namespace_restricted_until_a_container_needs_more():
    labels = harness.evaluated_with("prod", pod=EVERYTHING, workload__kind="statefulset").one(NAMESPACE).manifest["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    root_sidecar = {**SHIPPER, "securityContext": {"runAsUser": 0, "runAsNonRoot": False}}
    with_root = harness.evaluated_with("prod", pod={"volumes": EVERYTHING["volumes"], "sidecars": [root_sidecar]}, workload__kind="statefulset")
    labels = with_root.one(NAMESPACE).manifest["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    privileged = {**SHIPPER, "securityContext": {"privileged": True}}
    with_privileged = harness.evaluated_with("prod", pod={"volumes": EVERYTHING["volumes"], "sidecars": [privileged]}, workload__kind="statefulset")
    labels = with_privileged.one(NAMESPACE).manifest["metadata"]["labels"]
    assert "pod-security.kubernetes.io/enforce" not in labels


@pulumi.runtime.test
def test_without_the_escape_hatch_the_pods_are_as_before():
    spec = harness.evaluated_with("prod", pod={}, workload__kind="statefulset").pod_spec
    assert "runtimeClassName" not in spec and "initContainers" not in spec
    assert harness.evaluated("prod", 8).container["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_patch_merges_as_kubectl_patch_strategic_does():
    base = {"spec": {"containers": [{"name": "trainer", "image": "a", "env": [{"name": "A", "value": "1"}]}],
                     "dnsPolicy": "ClusterFirst", "nodeName": "n1"}}  # fmt: skip
    patch = {"spec": {"containers": [{"name": "trainer", "env": [{"name": "B", "value": "2"}]}, {"name": "new", "image": "b"}],
                      "dnsPolicy": "None", "nodeName": None, "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["x"]}]}}  # fmt: skip
    merged = strategic_merge(base, patch)
    (trainer, new) = merged["spec"]["containers"]
    assert trainer == {"name": "trainer", "image": "a", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    assert new == {"name": "new", "image": "b"}
    assert merged["spec"]["dnsPolicy"] == "None" and "nodeName" not in merged["spec"]
    assert merged["spec"]["hostAliases"] == [{"ip": "10.0.0.1", "hostnames": ["x"]}]
    assert base["spec"]["nodeName"] == "n1", "the base is not changed"
    # a list without a merge key is replaced
    assert strategic_merge({"args": ["a", "b"]}, {"args": ["c"]}) == {"args": ["c"]}
