"""Spare pods (`workload.sparePods`), under mocks: the workload runs the world's pods and its
spares, replaced one by one, and nothing derived from the size of the world changes. Their
behaviour: tests/trainer/test_trainer_multinode.py (processes) and
tests/cluster/test_cluster_nodes.py (the local cluster of three nodes)."""

from __future__ import annotations

import pytest

from ddp_infra import config as stack_config
from ddp_infra.gang import fewest_pods_admitted
from ddp_infra.world import World
from infra_harness import PROJECT, evaluated_with, stack_config_with

JOB = "kubernetes:batch/v1:Job"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
BUDGET = "kubernetes:policy/v1:PodDisruptionBudget"
POD_GROUP = "kubernetes:scheduling.volcano.sh/v1beta1:PodGroup"
KUEUE = {"scheduler": "kueue", "queue": "team-a"}


def without(spec: dict, *keys: str) -> dict:
    return {key: value for key, value in spec.items() if key not in keys}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_a_jobs_spares_are_more_pods_of_the_same_world_and_its_first_success_ends_it(stack):
    spared = evaluated_with(stack, nodes="4", workload__kind="job", workload__sparePods="2")
    plain = evaluated_with(stack, nodes="4", workload__kind="job")
    job, fixed = spared.one(JOB).manifest["spec"], plain.one(JOB).manifest["spec"]
    assert (job["parallelism"], job["completions"]) == (6, 6)
    # a spare exits 0 never; a pod of the world only once the run is done, which must end the Job
    assert job["successPolicy"] == {"rules": [{"succeededCount": 1}]}
    assert without(job, "successPolicy", "template", "parallelism", "completions") == without(fixed, "template", "parallelism", "completions")
    env, plain_env = spared.env, plain.env
    assert env.pop("SPARE_PODS")["value"] == "2" and "SPARE_PODS" not in plain_env
    assert env == plain_env  # NNODES, WORLD_SIZE, the rendezvous id: the world is the same
    assert (spared.outputs["nodes"], spared.outputs["worldSize"]) == (plain.outputs["nodes"], plain.outputs["worldSize"])


def test_a_jobsets_spares_are_its_jobs_replaced_pod_by_pod_instead_of_the_jobset_restarting_the_world():
    jobset = evaluated_with("prod", nodes="4", workload__kind="jobset", workload__sparePods="1").one(JOBSET).manifest["spec"]
    plain_job = evaluated_with("prod", nodes="4", workload__kind="job", workload__sparePods="1").one(JOB).manifest["spec"]
    job = jobset["replicatedJobs"][0]["template"]["spec"]
    assert without(job, "template") == without(plain_job, "template", "ttlSecondsAfterFinished", "suspend")
    assert jobset["failurePolicy"]["maxRestarts"] == 0


@pytest.mark.parametrize("spares, max_unavailable, min_available", [
    ("1", 1, 2),  # a drain may take one pod at a time: a spare, or a pod of the world whose place a spare takes
    ("2", 1, 3),
    ("1", 0, 3),  # 0: drains wait for the run to end
])  # fmt: skip
def test_the_disruption_budget_counts_the_spares(spares, max_unavailable, min_available):
    evaluation = evaluated_with("dev", nodes="2", workload__kind="job", workload__sparePods=spares,
                                workload__maxUnavailable=str(max_unavailable))  # fmt: skip
    assert evaluation.one(BUDGET).manifest["spec"]["minAvailable"] == min_available


def test_schedulers_admit_the_world_without_waiting_for_its_spares_except_kueue_which_admits_a_jobset_whole():
    job = evaluated_with("dev", nodes="2", workload__kind="job", workload__sparePods="2", scheduling__gang=KUEUE).one(JOB).manifest
    assert job["metadata"]["annotations"]["kueue.x-k8s.io/job-min-parallelism"] == "2"
    assert job["spec"]["parallelism"] == 4 and job["spec"]["suspend"] is True
    group = evaluated_with("dev", nodes="2", workload__kind="job", workload__sparePods="2", scheduling__gang__scheduler="volcano")
    assert group.one(POD_GROUP).manifest["spec"]["minMember"] == 2

    def fewest(kind: str, scheduler: str) -> int:
        config = stack_config.parse(stack_config_with("dev", nodes="2", workload__kind=kind, workload__sparePods="2",
                                               scheduling__gang=KUEUE if scheduler == "kueue" else {"scheduler": scheduler}))  # fmt: skip
        return fewest_pods_admitted(World.from_config(config, PROJECT, "dev"))

    # what the queue check asks the queue to hold: the world, and a JobSet's spares under Kueue
    assert [fewest("job", "kueue"), fewest("jobset", "kueue"), fewest("jobset", "volcano")] == [2, 4, 2]
