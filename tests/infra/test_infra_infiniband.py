"""InfiniBand that is real: the RDMA device resource, the secondary network, NCCL's HCA and GID
settings, and no capability that does nothing, so the namespace stays `restricted`."""

from __future__ import annotations

import pulumi
import pytest

import infra_harness as harness
from ddp_infra.names import SECONDARY_NETWORKS_ANNOTATION
from trainer import contract

NAMESPACE = "kubernetes:core/v1:Namespace"


@pulumi.runtime.test
def test_the_prod_stack_requests_its_rdma_devices_and_attaches_its_network():
    prod = harness.evaluated("prod", 8)
    values = harness.stack_file_config("prod")["network"]
    assert values["infiniband"] is True and values["rdmaResources"] and values["secondaryNetworks"]
    resources = prod.container["resources"]
    for name, count in values["rdmaResources"].items():
        assert resources["requests"][name] == resources["limits"][name] == str(count)
    annotations = prod.workload.manifest["spec"]["template"]["metadata"]["annotations"]
    assert annotations[SECONDARY_NETWORKS_ANNOTATION] == ",".join(values["secondaryNetworks"])
    # only on the pods: a Service or a StatefulSet has no network to attach
    assert SECONDARY_NETWORKS_ANNOTATION not in prod.workload.manifest["metadata"].get("annotations", {})
    assert prod.env[contract.NCCL_IB_DISABLE.name]["value"] == "0"
    assert prod.env[contract.NCCL_IB_HCA.name]["value"] == values["ibHca"]


@pulumi.runtime.test
def test_nccls_hca_and_gid_settings_reach_the_env():
    evaluation = harness.evaluated_with("prod", network__ibHca="=mlx5_0:1,mlx5_3:1", network__ibGidIndex="3")
    assert evaluation.env[contract.NCCL_IB_HCA.name]["value"] == "=mlx5_0:1,mlx5_3:1"
    assert evaluation.env[contract.NCCL_IB_GID_INDEX.name]["value"] == "3"
    assert contract.NCCL_IB_GID_INDEX.name not in harness.evaluated("prod", 8).env


@pulumi.runtime.test
def test_the_device_plugins_resource_name_and_count_are_config():
    evaluation = harness.evaluated_with("prod", network__rdmaResources={"rdma/rdma_shared_device_a": 1, "rdma/rdma_shared_device_b": "2"})
    resources = evaluation.container["resources"]
    assert resources["limits"]["rdma/rdma_shared_device_a"] == "1" and resources["limits"]["rdma/rdma_shared_device_b"] == "2"
    assert "rdma/hca_shared_devices_a" not in resources["limits"]


@pulumi.runtime.test
def test_without_infiniband_nothing_rdma_is_asked_for():
    evaluation = harness.evaluated_with("prod", network={"infiniband": False})
    resources = evaluation.container["resources"]
    assert not any(name.startswith("rdma/") for name in resources["limits"])
    assert SECONDARY_NETWORKS_ANNOTATION not in evaluation.workload.manifest["spec"]["template"]["metadata"].get("annotations", {})
    assert evaluation.env[contract.NCCL_IB_DISABLE.name]["value"] == "1"
    assert contract.NCCL_IB_HCA.name not in evaluation.env


@pulumi.runtime.test
def test_a_secondary_network_without_infiniband_is_attached_too():
    """RoCE or a storage network: Multus attaches it whatever NCCL does."""
    evaluation = harness.evaluated_with("prod", network={"infiniband": False, "secondaryNetworks": ["infra/roce-a@net1"]})
    annotations = evaluation.workload.manifest["spec"]["template"]["metadata"]["annotations"]
    assert annotations[SECONDARY_NETWORKS_ANNOTATION] == "infra/roce-a@net1"


@pytest.mark.parametrize("infiniband", [True, False])
@pulumi.runtime.test
def test_no_capability_is_added_and_the_namespace_stays_restricted(infiniband):
    evaluation = harness.evaluated_with("prod", network={"infiniband": infiniband})
    assert evaluation.container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    labels = evaluation.one(NAMESPACE).manifest["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
