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
from ddp_infra import config as stack_config
from ddp_infra import gang
from ddp_infra.names import GPU_RESOURCE, WORKLOAD_API_ALPHA, WORKLOAD_API_BETA
from ddp_infra.pod import pod_template
from ddp_infra.workload import ACCEPTED, workload_manifest
from ddp_infra.world import World
from trainer import contract

POD_GROUP = f"kubernetes:{gang.POD_GROUP_API_VERSION}:PodGroup"
GANG_WORKLOAD = f"kubernetes:{WORKLOAD_API_BETA}:Workload"
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


def the_job(workload: dict) -> dict:
    """The Job of a workload manifest: itself, or a JobSet's one replicated Job's template."""
    return workload if workload["kind"] == "Job" else workload["spec"]["replicatedJobs"][0]["template"]


@pytest.mark.parametrize("kind", [contract.INDEXED_JOB, contract.JOBSET])
@pytest.mark.parametrize("nodes, spares, min_count", [(64, 0, 64), ("48:64", 0, 48), (64, 2, 64)])
@pulumi.runtime.test
def test_with_the_kubernetes_scheduler_on_v1beta1_the_job_controller_is_handed_a_gang_of_the_world_s_minimum(kind, nodes, spares, min_count):
    """Kubernetes 1.37 gangs only a Job that asks for it. The stack writes a Workload of one PodGroup
    template, gang of the world's minimum (spares outside it), and the Job names the template and is
    controlled by what the Workload's controllerRef names (test_cluster_workload_api.py sees the
    Job controller make the PodGroup of it)."""
    evaluation = harness.evaluated_with("prod", workload__kind=kind, workload__sparePods=spares, nodes=nodes,
                                        scheduling__gang={"scheduler": "kubernetes"})  # fmt: skip
    group = evaluation.one(GANG_WORKLOAD)
    workload = evaluation.workload.manifest
    controller = ({"apiGroup": "scheduling.k8s.io", "kind": "Workload", "name": group.manifest["metadata"]["name"]}
                  if kind == contract.INDEXED_JOB else {"apiGroup": "jobset.x-k8s.io", "kind": "JobSet", "name": workload["metadata"]["name"]})  # fmt: skip
    assert group.manifest["spec"] == {"controllerRef": controller,
                                      "podGroupTemplates": [{"name": gang.GROUP_TEMPLATE_NAME, "schedulingPolicy": {"gang": {"minCount": min_count}}}]}  # fmt: skip
    job = the_job(workload)
    assert job["metadata"]["annotations"][gang.GROUP_TEMPLATE_ANNOTATION] == gang.GROUP_TEMPLATE_NAME
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (64 + spares, 64 + spares)
    assert group.urn in evaluation.workload.dependencies  # there before the Job's first pod
    owners = workload["metadata"].get("ownerReferences")
    if kind == contract.INDEXED_JOB:
        assert owners == [{"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload", "name": group.manifest["metadata"]["name"],
                           "uid": f"{group.name}-uid", "controller": True}]  # fmt: skip
    else:  # the JobSet's Job is the JobSet's
        assert owners is None and gang.GROUP_TEMPLATE_ANNOTATION not in workload["metadata"].get("annotations", {})


@pulumi.runtime.test
def test_a_kind_switch_replaces_the_gang_s_workload_and_a_resize_changes_it_in_place():
    """The API server refuses a change of a Workload's controllerRef (what a kind switch changes) and
    takes a new minCount in place (what a resize changes; test_infra_real_apiserver.py): the
    Workload is replaced, after the old one is gone, only when its controllerRef changes
    (test_cluster_workload_api.py resizes a world on 1.37)."""
    group = harness.evaluated_with("prod", nodes=64, scheduling__gang={"scheduler": "kubernetes"}).one(GANG_WORKLOAD)
    assert group.delete_before_replace is True
    assert group.replace_on_changes == ["spec.controllerRef"]


@pytest.mark.parametrize("kind", [contract.INDEXED_JOB, contract.JOBSET])
def test_on_v1alpha2_the_stack_writes_nothing_for_the_kubernetes_scheduler(kind):
    """Kubernetes 1.36's Job controller gangs every Indexed Job whose parallelism equals its
    completions by itself: the world's workload is the one it would be without a gang."""
    values = harness.stack_config_with("prod", workload__kind=kind, nodes=64, scheduling__gang={"scheduler": "kubernetes"})
    config = stack_config.parse(values)
    alpha = World.from_config(config, "ddp-infra", "prod", WORKLOAD_API_ALPHA)
    plain = World.from_config(config.model_copy(update={"scheduling": config.scheduling.model_copy(
        update={"gang": config.scheduling.gang.model_copy(update={"scheduler": "none"})})}), "ddp-infra", "prod")  # fmt: skip
    assert not gang.writes_workload(alpha)
    job = the_job(workload_manifest(alpha, pod_template(alpha)))
    assert (job["spec"]["completionMode"], job["spec"]["parallelism"], job["spec"]["completions"]) == ("Indexed", 64, 64)
    assert workload_manifest(alpha, pod_template(alpha)) == workload_manifest(plain, pod_template(plain))


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


LOST_FIXED = "a lost pod: the world waits for its replacement and resumes from its last checkpoint"
LOST_ELASTIC = "a lost pod: the world goes on without it, at no fewer than 2, from its last checkpoint, and grows back once it is replaced"
LOST_SPARE = "a lost pod: a spare takes its place, and the world resumes from its last checkpoint"


@pytest.mark.parametrize("changes, said", [
    ({"scheduling__gang": {"scheduler": "none"}},
     f"a world of 4: its pods are scheduled one by one; it trains once 4 of them run; {LOST_FIXED}"),
    ({"scheduling__gang": {"scheduler": "kubernetes"}},
     f"a world of 4: the Kubernetes scheduler (scheduling.k8s.io/v1beta1) binds its 4 pods together, or none; {LOST_FIXED}"),
    ({"scheduling__gang": {"scheduler": "kubernetes"}, "nodes": "2:4"},
     "admitted at 2, growing to 4: the Kubernetes scheduler (scheduling.k8s.io/v1beta1) binds 2 pods together, or none; "
     f"the rest as room appears; {LOST_ELASTIC}"),
    ({"scheduling__gang": VOLCANO, "workload__sparePods": 1},
     f"a world of 4: Volcano binds 4 of its 5 pods together (minMember), or none; the rest (and its 1 spare pod(s)) as room appears; {LOST_SPARE}"),
    ({"scheduling__gang": VOLCANO}, f"a world of 4: Volcano binds its 4 pods together (minMember), or none; {LOST_FIXED}"),
    ({"scheduling__gang": VOLCANO, "nodes": "2:4"},
     f"admitted at 2, growing to 4: Volcano binds 2 of its 4 pods together (minMember), or none; the rest as room appears; {LOST_ELASTIC}"),
    ({"scheduling__gang": KUEUE, "workload__sparePods": 1},
     "a world of 4: Kueue admits it against LocalQueue team-a's quota with as many of its 5 pods as the quota "
     f"holds, at least 4, or none, and keeps that size; {LOST_SPARE}"),
    ({"scheduling__gang": KUEUE, "workload__sparePods": 1, "workload__kind": contract.JOBSET},
     f"a world of 4: Kueue admits it whole against LocalQueue team-a's quota: its 5 pods at once, or none; {LOST_SPARE}"),
])  # fmt: skip
def test_the_preview_says_what_the_scheduler_will_do_with_the_world(changes, said):
    """An output, so `pulumi preview` (and the pull request's comment) shows it before anything is made."""
    evaluation = harness.evaluated_with("prod", **{"nodes": 4, "workload__kind": contract.INDEXED_JOB, **changes})
    assert evaluation.outputs["admission"] == said
