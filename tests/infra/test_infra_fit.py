"""The fit check (ddp_infra/fit.py): how many of the world's pods a cluster's nodes can ever hold,
and how much of the world a gang scheduler's queue can ever admit (ddp_infra/queue_quota.py).

Pure: node and queue objects as the API server returns them, against the pod template the program makes.
The check on a real cluster, through the real engine, is in tests/cluster/test_cluster_fit.py.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any, Callable

import pulumi

import infra_harness as harness
from ddp_infra import gang, pod, queue_quota
from ddp_infra.components import trainer, training_world
from ddp_infra.fit import PodAsk, fit_problem, node_room
from ddp_infra.names import GPU_RESOURCE

GIB = 2**30


def node(name: str, cpu="2", memory="8Gi", gpus: str | None = None, pods="110", taints=(), labels=None, unschedulable=False) -> dict:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, **({GPU_RESOURCE: gpus} if gpus else {})}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": list(taints), **({"unschedulable": True} if unschedulable else {})},
        "status": {"allocatable": allocatable},
    }


def ask(cpu="1", memory="4Gi", gpus: str | None = None, **spec) -> PodAsk:
    requests = {"cpu": cpu, "memory": memory, **({GPU_RESOURCE: gpus} if gpus else {})}
    return PodAsk.of({"spec": {"containers": [{"resources": {"requests": requests, "limits": dict(requests)}}], **spec}})


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def test_a_node_holds_as_many_pods_as_its_scarcest_allocatable_resource_allows():
    assert node_room(node("a", cpu="2", memory="8Gi"), ask()).holds == 2
    assert node_room(node("a", cpu="16", memory="6Gi"), ask()).holds == 1  # memory bounds it
    assert node_room(node("a", cpu="3500m"), ask(cpu="500m", memory="1Gi")).holds == 7
    assert node_room(node("a", cpu="64", memory="512Gi", pods="3"), ask()).holds == 3  # the node's pod limit
    no_gpus = node_room(node("a", cpu="64", memory="512Gi"), ask(gpus="8"))
    assert no_gpus.holds == 0 and no_gpus.why == f"allocatable cpu 64, memory 512Gi, {GPU_RESOURCE} 0, pods 110"
    assert node_room(node("a", cpu="64", memory="512Gi", gpus="8"), ask(gpus="8")).holds == 1


def test_the_world_that_fits_passes_and_one_pod_more_is_refused_with_each_nodes_count():
    nodes = [node("b", cpu="2"), node("a", cpu="1")]
    assert fit_problem(ask(), 3, nodes) is None
    problem = fit_problem(ask(), 4, nodes)
    assert problem.startswith("ddp-infra:nodes asks for 4 pods at once, each requesting cpu 1, memory 4Gi; "
                              "the cluster's 2 node(s) can ever hold 3 of them:"), problem  # fmt: skip
    assert "node a: 1 (allocatable cpu 1, memory 8Gi, pods 110)" in problem
    assert problem.index("node a:") < problem.index("node b: 2 (")
    assert "cpu 500m" in fit_problem(ask(cpu="500m"), 40, nodes)


def test_taints_cordons_selectors_and_required_affinity_close_nodes_with_the_reason():
    tainted = node("gpu-0", cpu="64", memory="512Gi", gpus="8", taints=[GPU_TAINT])
    assert node_room(tainted, ask(gpus="8")) .why == "taint nvidia.com/gpu=present:NoSchedule not tolerated (scheduling.tolerations)"
    for tolerations in ([{"key": "nvidia.com/gpu", "operator": "Exists"}],
                        [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}],
                        [{"operator": "Exists"}]):  # fmt: skip
        assert node_room(tainted, ask(gpus="8", tolerations=tolerations)).holds == 1, tolerations
    wrong_value = [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}]
    assert node_room(tainted, ask(gpus="8", tolerations=wrong_value)).holds == 0
    preferred = node("a", taints=[{"key": "spot", "effect": "PreferNoSchedule"}])
    assert node_room(preferred, ask()).holds == 2  # only discourages
    assert node_room(node("a", unschedulable=True), ask()).why == "cordoned (unschedulable)"

    pool = node("a", labels={"pool": "train", "gen": "5"})
    assert node_room(pool, ask(nodeSelector={"pool": "train"})).holds == 2
    assert node_room(pool, ask(nodeSelector={"pool": "infer"})).why == "label pool=infer missing (scheduling.nodeSelector)"

    def required(*terms):
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}

    newer = {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}, {"key": "pool", "operator": "In", "values": ["train"]}]}
    assert node_room(pool, ask(affinity=required(newer))).holds == 2
    older = {"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["5"]}]}
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["a"]}]}
    assert node_room(pool, ask(affinity=required(older, by_name))).why == "no term of the required node affinity matches (scheduling.affinity)"
    assert node_room(pool, ask(affinity=required(older, {"matchExpressions": [{"key": "spot", "operator": "DoesNotExist"}]}))).holds == 2


@pulumi.runtime.test
def test_the_prod_world_is_counted_from_the_pod_template_the_program_makes():
    evaluation = harness.evaluated_with("prod", nodes=3)
    prod = PodAsk.of(evaluation.pod_template)
    # 96 CPUs, 1000Gi, 8 GPUs and one RDMA device each, on nodes labelled with GPUs, whose taint it tolerates
    assert prod.requests[GPU_RESOURCE] == 8 and prod.requests["memory"] == 1000 * GIB and prod.requests["pods"] == 1
    gpu_node = node("gpu-0", cpu="128", memory="2000Gi", gpus="8", taints=[GPU_TAINT], labels={"nvidia.com/gpu.present": "true"})
    gpu_node["status"]["allocatable"]["rdma/hca_shared_devices_a"] = "1000"
    assert fit_problem(prod, 3, [{**gpu_node, "metadata": {**gpu_node["metadata"], "name": f"gpu-{i}"}} for i in range(3)]) is None
    problem = fit_problem(prod, 3, [gpu_node, node("cpu-0", cpu="256", memory="4000Gi")])
    assert "can ever hold 1 of them" in problem and "node cpu-0: 0 (label nvidia.com/gpu.present=true missing" in problem, problem


@pulumi.runtime.test
def test_the_fit_check_counts_the_very_template_the_stack_runs_built_once(monkeypatch):
    """Built once, the template the fit check counts cannot drift from the one the namespace's
    security level, Volcano's PodGroup and the workload are made of."""
    built, handed = [], {}

    def building(world):
        built.append(pod.pod_template(world))
        return built[-1]

    def recording(consumer, original):
        def record(*args):
            handed[consumer] = args[-1]  # each takes the template (the namespace: its spec) last
            return original(*args)

        return record

    monkeypatch.setattr(training_world, "pod_template", building)
    monkeypatch.setattr(training_world, "require_world_fits", recording("fit check", training_world.require_world_fits))
    monkeypatch.setattr(training_world, "pod_security_level", recording("namespace", training_world.pod_security_level))
    monkeypatch.setattr(gang, "pod_group_manifest", recording("pod group", gang.pod_group_manifest))
    monkeypatch.setattr(trainer, "workload_manifest", recording("workload", trainer.workload_manifest))
    evaluation = harness.evaluated_with("prod", scheduling__gang={"scheduler": "volcano", "queue": "research"})
    (template,) = built
    assert handed["namespace"] is template["spec"]
    for consumer in ("fit check", "pod group", "workload"):
        assert handed[consumer] is template, consumer
    assert evaluation.pod_template == template


def test_an_unset_request_counts_as_its_limit_as_the_api_server_sets_it():
    template = {"spec": {"containers": [{"resources": {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"memory": "512Mi"}}}]}}
    assert gang.pod_requests(template) == {"cpu": Decimal(2), "memory": Decimal(512 * 2**20)}


# --- a gang scheduler's queue ---------------------------------------------------------------------

def cluster_queue(name: str, flavors: dict[str, dict[str, dict]], cohort: str | None = None) -> dict:
    """flavors: {flavor: {resource: {"nominalQuota": ..., optional "borrowingLimit", "lendingLimit"}}}."""
    return {
        "metadata": {"name": name},
        "spec": {
            **({"cohort": cohort} if cohort else {}),
            "resourceGroups": [{
                "coveredResources": sorted({r for resources in flavors.values() for r in resources}),
                "flavors": [{"name": f, "resources": [{"name": r, **q} for r, q in resources.items()]} for f, resources in flavors.items()],
            }],
        },
    }  # fmt: skip


LOCAL_QUEUE = {"metadata": {"name": "team-a"}, "spec": {"clusterQueue": "worlds"}}


def test_kueue_admits_at_most_one_flavors_quota_and_what_its_cohort_lends():
    worlds = cluster_queue("worlds", {
        "on-demand": {"cpu": {"nominalQuota": "8"}, "pods": {"nominalQuota": 4}},
        "spot": {"cpu": {"nominalQuota": "6", "borrowingLimit": "10"}, "pods": {"nominalQuota": 2}},
    }, cohort="research")  # fmt: skip
    lender = cluster_queue("other", {"spot": {"cpu": {"nominalQuota": "20", "lendingLimit": "4"}, "pods": {"nominalQuota": 9}}}, cohort="research")
    limit = queue_quota.kueue_limit(LOCAL_QUEUE, worlds, [lender])
    assert limit.queue == "Kueue ClusterQueue worlds (LocalQueue team-a)"
    # one flavor for the whole pod set: the larger of 8 on-demand and 6 + min(10, 4 lent) spot
    assert limit.most["cpu"] == (Decimal(10), "flavor spot: nominal quota 6 + 4 borrowed from its cohort")
    assert limit.most["pods"] == (Decimal(11), "flavor spot: nominal quota 2 + 9 borrowed from its cohort")
    alone = queue_quota.kueue_limit(LOCAL_QUEUE, cluster_queue("worlds", {"spot": {"cpu": {"nominalQuota": "6", "borrowingLimit": "10"}}}), [])
    assert alone.most["cpu"] == (Decimal(6), "flavor spot: nominal quota 6")


def test_a_cluster_queues_cohort_is_read_as_kueues_v1beta1_and_v1beta2_apis_name_it():
    """Kueue 0.15 and later serve v1beta2 first, where a ClusterQueue's `cohort` is `cohortName`:
    its lenders count either way."""
    worlds = cluster_queue("worlds", {"spot": {"cpu": {"nominalQuota": "6"}}}, cohort="research")
    renamed = {**worlds, "spec": {"cohortName": "research", **{k: v for k, v in worlds["spec"].items() if k != "cohort"}}}
    lender = cluster_queue("other", {"spot": {"cpu": {"nominalQuota": "20", "lendingLimit": "4"}}}, cohort="research")
    lender_v1beta2 = {**lender, "metadata": {"name": "third"}, "spec": {"cohortName": "research", "resourceGroups": lender["spec"]["resourceGroups"]}}
    stranger = cluster_queue("stranger", {"spot": {"cpu": {"nominalQuota": "50"}}}, cohort="elsewhere")
    everything = [worlds, lender, lender_v1beta2, stranger]
    assert queue_quota.cohort_of(renamed) == queue_quota.cohort_of(worlds) == "research"
    for queue in (worlds, renamed):
        peers = queue_quota.cohort_peers(queue, everything)
        assert [q["metadata"]["name"] for q in peers] == ["other", "third"]
        assert queue_quota.kueue_limit(LOCAL_QUEUE, queue, peers).most["cpu"][0] == Decimal(14)
    assert queue_quota.cohort_peers(cluster_queue("alone", {}), everything) == []


def test_a_world_past_its_kueue_quota_or_asking_an_uncovered_resource_is_refused_with_the_numbers():
    limit = queue_quota.kueue_limit(LOCAL_QUEUE, cluster_queue("worlds", {"default": {
        "cpu": {"nominalQuota": "100"}, "memory": {"nominalQuota": "100Gi"}, "pods": {"nominalQuota": 3}}}), [])  # fmt: skip
    small = ask(cpu="10m", memory="16Mi").requests
    assert queue_quota.queue_problem(small, 3, limit) is None
    problem = queue_quota.queue_problem(small, 4, limit)
    assert problem == ("the world's 4 pods together ask more than Kueue ClusterQueue worlds (LocalQueue team-a) can ever admit:\n"
                       "    pods: 4 asked, at most 3 (flavor default: nominal quota 3)"), problem  # fmt: skip
    assert "memory: 400Gi asked, at most 100Gi (flavor default: nominal quota 100Gi)" in queue_quota.queue_problem(ask(memory="100Gi").requests, 4, limit)
    assert f"{GPU_RESOURCE}: 16 asked, no quota for it" in queue_quota.queue_problem(ask(gpus="8").requests, 2, limit)


def test_a_volcano_queue_bounds_only_what_its_capability_names():
    queue = {"metadata": {"name": "default"}, "spec": {"capability": {"cpu": "3"}}}
    limit = queue_quota.volcano_limit(queue)
    assert queue_quota.queue_problem(ask(cpu="1", gpus="8").requests, 3, limit) is None  # GPUs and memory unbounded
    assert queue_quota.queue_problem(ask(cpu="1").requests, 4, limit) == (
        "the world's 4 pods together ask more than Volcano Queue default can ever admit:\n    cpu: 4 asked, at most 3 (capability 3)")
    assert queue_quota.queue_problem(ask().requests, 1000, queue_quota.volcano_limit({"metadata": {"name": "open"}, "spec": {}})) is None


def test_a_node_selector_value_known_only_after_up_is_not_counted_while_a_plain_one_no_node_has_is_refused(monkeypatch, caplog):
    """DdpTrainingWorldArgs.node_selector: a node pool's label handed in as an Output."""
    from ddp_infra import fit
    from ddp_infra.components import DdpTrainingWorld, DdpTrainingWorldArgs
    from ddp_infra.components.kubernetes_object import KubernetesObject

    monkeypatch.setattr(fit, "needs_no_cluster", lambda _: False)  # the check runs, on these nodes
    monkeypatch.setattr(fit, "read_cluster", lambda _: ([node(f"n{i}", cpu="4", memory="16Gi", labels={"pool": "gpu-a"}) for i in range(2)], None))
    monkeypatch.setattr(fit, "read_queue_limit", lambda _: None)
    config = harness.stack_config_with("dev")

    def world_on(pool: Callable[[], Any]) -> harness.Evaluation:
        def program(_: Any) -> dict:
            return DdpTrainingWorld("mine", DdpTrainingWorldArgs(config=config, node_selector={"pool": pool()})).outputs

        return harness.evaluate(config, build=program)

    def made() -> Any:  # the label's value as another resource's output
        return KubernetesObject("pool", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gpu-b"}}).metadata["name"]  # type: ignore[attr-defined]

    with caplog.at_level(logging.WARNING):
        later = world_on(made)
    assert later.error is None, later.error
    assert "whether the world fits the cluster's nodes is not checked: a nodeSelector value is known only once" in caplog.text
    assert later.pod_template["spec"]["nodeSelector"] == {"pool": "gpu-b"}
    refused = world_on(lambda: "gpu-b")
    assert "the world cannot fit in the cluster; nothing was created" in str(refused.error) and refused.registered == [], refused.error
    assert world_on(lambda: "gpu-a").error is None
