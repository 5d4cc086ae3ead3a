"""Gang admission (`scheduling.gang`): what Kueue, Volcano and the Kubernetes scheduler are handed,
per workload kind.

The schedulers' own behaviour is tested on the local cluster (tests/cluster/test_cluster_kueue.py,
test_cluster_volcano.py, test_cluster_workload_api.py), and the PodGroup against Volcano's CRD
schema (test_infra_real_apiserver.py).
"""

from __future__ import annotations

from decimal import Decimal

import pulumi
import pytest

import infra_harness as harness
from ddp_infra import gang
from ddp_infra.names import GPU_RESOURCE
from ddp_infra.workload import ACCEPTED
from trainer import contract

POD_GROUP = f"kubernetes:{gang.POD_GROUP_API_VERSION}:PodGroup"
KUEUE = {"scheduler": "kueue", "queue": "team-a"}
VOLCANO = {"scheduler": "volcano", "queue": "research"}
SHIPPER = {"name": "log-shipper", "image": "fluent/fluent-bit:3.2", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}
FETCH = {"name": "fetch", "image": "busybox", "resources": {"requests": {"cpu": "200", "memory": "64Mi"}}}


@pytest.mark.parametrize("kind", [contract.INDEXED_JOB, contract.JOBSET])
@pulumi.runtime.test
def test_with_kueue_the_workload_waits_suspended_in_its_queue(kind):
    evaluation = harness.evaluated_with("prod", workload__kind=kind, scheduling__gang={**KUEUE, "workloadPriorityClass": "high"})
    workload = evaluation.workload.manifest
    assert workload["metadata"]["labels"][gang.KUEUE_QUEUE_LABEL] == "team-a"
    assert workload["metadata"]["labels"][gang.KUEUE_PRIORITY_LABEL] == "high"
    assert workload["spec"]["suspend"] is True, "no pod may start before Kueue admits the whole world"
    assert evaluation.of_type(POD_GROUP) == []
    assert "schedulerName" not in evaluation.pod_spec, "Kueue admits; the default scheduler places the pods"
    harness.validate_manifest(workload)


@pytest.mark.parametrize("kind", [contract.INDEXED_JOB, contract.JOBSET])
@pytest.mark.parametrize("mode", ["required", "preferred"])
@pulumi.runtime.test
def test_a_topology_level_is_written_on_the_pod_template_for_kueue_to_place_the_world_within(kind, mode):
    level = "cloud.example.com/topology-block"
    evaluation = harness.evaluated_with("prod", workload__kind=kind, scheduling__gang=KUEUE, scheduling__topology={"level": level, "mode": mode})
    annotations = evaluation.pod_template["metadata"]["annotations"]
    assert annotations[gang.KUEUE_TOPOLOGY_ANNOTATIONS[mode]] == level
    assert not [key for key in annotations if key.startswith("kueue.x-k8s.io/podset-") and key != gang.KUEUE_TOPOLOGY_ANNOTATIONS[mode]]
    without = harness.evaluated_with("prod", workload__kind=kind, scheduling__gang=KUEUE).pod_template["metadata"].get("annotations", {})
    assert not [key for key in without if key.startswith("kueue.x-k8s.io/podset-")]
    harness.validate_manifest(evaluation.workload.manifest)


@pytest.mark.parametrize("kind, spares", [(contract.INDEXED_JOB, 0), (contract.JOBSET, 0), (contract.INDEXED_JOB, 2)])
@pulumi.runtime.test
def test_slices_of_the_world_are_written_for_kueue_to_place_each_within_a_lower_level(kind, spares):
    slice_ = {"level": "cloud.example.com/rack", "size": 2}
    evaluation = harness.evaluated_with("prod", workload__kind=kind, scheduling__gang=KUEUE, nodes=8, workload__sparePods=spares,
                                        scheduling__topology={"level": "cloud.example.com/block", "slice": slice_})  # fmt: skip
    annotations = evaluation.pod_template["metadata"]["annotations"]
    assert annotations[gang.KUEUE_TOPOLOGY_ANNOTATIONS["required"]] == "cloud.example.com/block"
    assert annotations[gang.KUEUE_SLICE_LEVEL_ANNOTATION] == "cloud.example.com/rack"
    assert annotations[gang.KUEUE_SLICE_SIZE_ANNOTATION] == "2"
    unsliced = harness.evaluated_with("prod", workload__kind=kind, scheduling__gang=KUEUE, nodes=8,
                                      scheduling__topology={"level": "cloud.example.com/block"}).pod_template["metadata"]["annotations"]  # fmt: skip
    assert gang.KUEUE_SLICE_LEVEL_ANNOTATION not in unsliced and gang.KUEUE_SLICE_SIZE_ANNOTATION not in unsliced


@pytest.mark.parametrize("kind", contract.WORKLOAD_KINDS)
@pulumi.runtime.test
def test_without_gang_admission_nothing_of_kueue_or_volcano_is_written(kind):
    evaluation = harness.evaluated_with("prod", workload__kind=kind, scheduling__gang={"scheduler": "none"})
    workload = evaluation.workload.manifest
    assert "suspend" not in workload["spec"]
    assert not [key for key in workload["metadata"]["labels"] if key.startswith("kueue.x-k8s.io/")]
    assert "schedulerName" not in evaluation.pod_spec
    assert gang.VOLCANO_GROUP_ANNOTATION not in evaluation.pod_template["metadata"].get("annotations", {})
    assert evaluation.of_type(POD_GROUP) == []
    assert workload["metadata"]["annotations"]["pulumi.com/waitFor"] == ACCEPTED[kind]


@pytest.mark.parametrize("kind", [contract.INDEXED_JOB, contract.JOBSET])
@pulumi.runtime.test
def test_with_the_kubernetes_scheduler_the_job_is_one_its_controller_makes_a_pod_group_of(kind):
    """The Job controller's WorkloadWithJob makes a PodGroup of all a Job's pods when the Job is
    Indexed, its parallelism equal to its completions and above 1 (test_cluster_workload_api.py);
    the stack writes nothing else for this scheduler."""
    evaluation = harness.evaluated_with("prod", workload__kind=kind, scheduling__gang={"scheduler": "kubernetes"}, nodes=64)
    plain = harness.evaluated_with("prod", workload__kind=kind, scheduling__gang={"scheduler": "none"}, nodes=64)
    workload = evaluation.workload.manifest
    job = workload["spec"] if kind == contract.INDEXED_JOB else workload["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job["completionMode"], job["parallelism"], job["completions"]) == ("Indexed", 64, 64)
    assert workload == plain.workload.manifest
    assert sorted(r.type for r in evaluation.registered) == sorted(r.type for r in plain.registered)


@pytest.mark.parametrize("kind", contract.WORKLOAD_KINDS)
@pulumi.runtime.test
def test_with_volcano_the_pods_are_one_pod_group_of_the_whole_world(kind):
    evaluation = harness.evaluated_with("prod", workload__kind=kind, scheduling__gang=VOLCANO,
                                        scheduling__priorityClassName="training-high", nodes=64)  # fmt: skip
    group = evaluation.one(POD_GROUP)
    manifest = group.manifest
    assert evaluation.pod_spec["schedulerName"] == gang.VOLCANO_SCHEDULER
    assert evaluation.pod_template["metadata"]["annotations"][gang.VOLCANO_GROUP_ANNOTATION] == manifest["metadata"]["name"]
    assert manifest["metadata"]["namespace"] == "ml-train"
    assert manifest["spec"]["minMember"] == 64
    assert manifest["spec"]["queue"] == "research"
    assert manifest["spec"]["priorityClassName"] == "training-high"
    # the prod pod: 96 CPUs, 1000Gi, 8 GPUs and one RDMA device each
    assert manifest["spec"]["minResources"] == {
        "cpu": str(96 * 64), "memory": str(1000 * 2**30 * 64), GPU_RESOURCE: str(8 * 64), "rdma/hca_shared_devices_a": "64",
    }
    assert group.urn in evaluation.workload.dependencies, "the group exists before the first pod"
    assert "suspend" not in evaluation.workload.manifest["spec"]


@pulumi.runtime.test
def test_the_pod_group_follows_the_size_of_the_world():
    groups = [
        harness.evaluated_with("prod", workload__kind=contract.INDEXED_JOB, scheduling__gang=VOLCANO, nodes=nodes).one(POD_GROUP).manifest["spec"]
        for nodes in (2, 16)
    ]
    assert [spec["minMember"] for spec in groups] == [2, 16]
    assert [spec["minResources"]["cpu"] for spec in groups] == ["192", "1536"]


@pulumi.runtime.test
def test_the_pod_group_asks_for_what_the_sidecars_and_init_containers_ask_too():
    evaluation = harness.evaluated_with("prod", workload__kind=contract.INDEXED_JOB, scheduling__gang=VOLCANO, nodes=2,
                                        pod={"sidecars": [SHIPPER], "initContainers": [FETCH]})  # fmt: skip
    resources = evaluation.one(POD_GROUP).manifest["spec"]["minResources"]
    # the fetch init container runs beside the shipper, alone: 200 + 0.5 CPUs beats the trainer's 96 + 0.5
    assert resources["cpu"] == str(2 * 200 + 1)
    # the trainer and the shipper run together: 1000Gi + 256Mi beats 64Mi + 256Mi
    assert resources["memory"] == str(2 * (1000 * 2**30 + 256 * 2**20))


def test_pod_requests_write_fractions_as_millis():
    template = {"spec": {"containers": [{"resources": {"requests": {"cpu": "250m", "memory": "1.5Gi"}}}]}}
    assert gang.pod_requests(template) == {"cpu": Decimal("0.250"), "memory": Decimal(3 * 2**29)}
    assert gang.quantity_text(Decimal("0.250") * 3) == "750m"
    assert gang.quantity_text(Decimal("0.250") * 4) == "1"
