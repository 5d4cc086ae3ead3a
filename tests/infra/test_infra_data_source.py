"""`storage.datasets.source`: an init container of the program's, `fetch-data`, that fills the
datasets claim before the trainer starts (trainer/fetch.py): the trainer's image, user, CPU and
memory, none of its GPUs or devices, the claim mounted writable; before the user's own init
containers; and nothing of it without a source."""

from __future__ import annotations

import pulumi
import pytest

import infra_harness as harness
from ddp_infra.pod_security import RESTRICTED, pod_security_level
from trainer import contract

SHA256 = "5" * 64
SOURCE = {"url": "https://datasets.example.com/v3/corpus.tar.gz?X-Amz-Signature=abc", "sha256": SHA256}


@pytest.mark.parametrize("kind", contract.WORKLOAD_KINDS)
@pulumi.runtime.test
def test_a_source_fills_the_claim_in_an_init_container_before_the_trainer(kind):
    evaluation = harness.evaluated_with("prod", storage__datasets__source=SOURCE, workload__kind=kind,
                                        pod__initContainers=[{"name": "warm-cache", "image": "busybox:1.37"}])  # fmt: skip
    spec, trainer = evaluation.pod_spec, evaluation.container
    fetch, users = spec["initContainers"]
    assert users["name"] == "warm-cache"
    assert fetch["name"] == "fetch-data" and fetch["image"] == trainer["image"] and fetch["imagePullPolicy"] == trainer["imagePullPolicy"]
    assert fetch["command"] == ["python", "-m", "trainer.fetch"]
    assert fetch["args"] == ["--url", SOURCE["url"], "--sha256", SHA256, "--into", "/data/corpus"]
    # prod's pods ask for GPUs and RDMA devices: the fetch asks for the trainer's CPU and memory only
    assert "nvidia.com/gpu" in trainer["resources"]["limits"]
    for amounts in ("requests", "limits"):
        assert fetch["resources"][amounts] == {k: v for k, v in trainer["resources"][amounts].items() if k in ("cpu", "memory")}
    assert fetch["volumeMounts"] == [{"name": "datasets", "mountPath": "/data", "readOnly": False}, {"name": "tmp", "mountPath": "/tmp"}]
    assert fetch["securityContext"] == trainer["securityContext"] and fetch["terminationMessagePolicy"] == "FallbackToLogsOnError"
    # its pod's name, as the trainer reads it, for the record of who fetched the data
    (pod_name,) = [entry for entry in fetch["env"] if entry["name"] == contract.POD_NAME.name]
    assert pod_name == {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} and pod_name in trainer["env"]
    assert pod_security_level(spec) == RESTRICTED
    harness.validate_manifest(evaluation.workload.manifest)


@pulumi.runtime.test
def test_an_object_store_prefix_is_fetched_with_its_endpoint_and_the_stacks_aws_credentials():
    prefix = {"url": "s3://corpora/web/v3/", "sha256": SHA256, "endpoint": "http://minio.storage.svc:9000"}
    values = harness.stack_config_with("dev", storage__datasets__source=prefix, env={"AWS_REGION": "eu-west-1", "HF_HUB_OFFLINE": "1"},
                                       secretEnv={"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "key", "WANDB_API_KEY": "k"})  # fmt: skip
    evaluation = harness.evaluate(values, stack="dev", secret_keys=("secretEnv",))
    assert evaluation.error is None, str(evaluation.error)
    fetch, trainer = evaluation.pod_spec["initContainers"][0], evaluation.container
    assert fetch["args"] == ["--url", prefix["url"], "--sha256", SHA256, "--into", "/data/v3", "--endpoint", prefix["endpoint"]]
    handed = {entry["name"]: entry for entry in fetch["env"]}
    assert {name for name in handed if name != "HOME"} == {"AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "POD_NAME"}
    assert all(handed[name] == entry for entry in trainer["env"] if (name := entry["name"]) in handed and name != "HOME")
    assert "value" not in handed["AWS_SECRET_ACCESS_KEY"], "read from the stack's Secret, as the trainer reads it"


@pulumi.runtime.test
def test_the_stacks_annotations_give_the_world_s_service_account_a_cloud_identity():
    role = "arn:aws:iam::123456789012:role/corpus-reader"
    evaluation = harness.evaluated_with("dev", annotations={"eks.amazonaws.com/role-arn": role})
    (account,) = [m for m in evaluation.kubernetes_manifests if m["kind"] == "ServiceAccount"]
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == role
    assert evaluation.pod_spec["serviceAccountName"] == account["metadata"]["name"]


@pulumi.runtime.test
def test_into_names_the_directory_and_no_source_adds_nothing():
    evaluation = harness.evaluated_with("dev", storage__datasets__source={**SOURCE, "into": "corpus-v3"})
    assert evaluation.pod_spec["initContainers"][0]["args"][-1] == "/data/corpus-v3"
    assert "initContainers" not in harness.evaluated_with("dev").pod_spec
