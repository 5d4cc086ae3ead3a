"""An elastic world (`nodes: MIN:MAX`), under mocks: what derives from the size of the world holds
for every size in the range. Its behaviour on a cluster: tests/cluster/test_cluster_nodes.py (a Job) and
test_cluster_elastic_jobset.py."""

from __future__ import annotations

import pytest

from infra_harness import evaluate, evaluated, evaluated_with, stack_config_with

JOB = "kubernetes:batch/v1:Job"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
BUDGET = "kubernetes:policy/v1:PodDisruptionBudget"
POD_GROUP = "kubernetes:scheduling.volcano.sh/v1beta1:PodGroup"


def without(spec: dict, *keys: str) -> dict:
    return {key: value for key, value in spec.items() if key not in keys}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_an_elastic_jobs_pods_are_its_maximum_replaced_one_by_one_and_its_first_success_ends_it(stack):
    job = evaluated(stack, "2:4", "job").one(JOB).manifest["spec"]
    fixed = evaluated(stack, 4, "job").one(JOB).manifest["spec"]
    assert (job["parallelism"], job["completions"]) == (4, 4)
    # a pod exits 0 only once the run is done: an index that never started must not start a world after it
    assert job["successPolicy"] == {"rules": [{"succeededCount": 1}]}
    assert "successPolicy" not in fixed
    assert without(job, "successPolicy", "template") == without(fixed, "template")


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_an_elastic_jobsets_job_replaces_lost_pods_instead_of_the_jobset_restarting_the_world(stack):
    jobset = evaluated(stack, "2:4", "jobset").one(JOBSET).manifest["spec"]
    (replicated,) = jobset["replicatedJobs"]
    job = replicated["template"]["spec"]
    plain = evaluated(stack, "2:4", "job").one(JOB).manifest["spec"]
    # the pods are the plain Job's, named as a JobSet's pods are
    assert without(job, "template") == without(plain, "template", "ttlSecondsAfterFinished", "suspend")
    assert jobset["failurePolicy"]["maxRestarts"] == 0
    fixed = evaluated(stack, 4, "jobset").one(JOBSET).manifest["spec"]
    assert fixed["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] == 0
    assert fixed["failurePolicy"]["maxRestarts"] > 0


@pytest.mark.parametrize("nodes, max_unavailable, min_available", [
    ("2:4", 1, 3),  # one pod at a time, as for a fixed world
    ("3:4", 2, 3),  # never below the minimum, where the world would stop instead of going on smaller
    ("2:4", 0, 4),  # 0: drains wait for the run to end
    ("4", 1, 3),
])  # fmt: skip
def test_the_disruption_budget_never_lets_a_drain_take_an_elastic_world_below_its_minimum(nodes, max_unavailable, min_available):
    evaluation = evaluated_with("dev", nodes=nodes, workload__kind="job", workload__maxUnavailable=str(max_unavailable))
    assert evaluation.one(BUDGET).manifest["spec"]["minAvailable"] == min_available


@pytest.mark.parametrize("kind", ["job", "jobset"])
def test_the_range_reaches_the_env_outputs_and_rendezvous_id(kind):
    evaluation = evaluated("prod", "32:64", kind)
    env = evaluation.env
    procs = int(env["NPROC_PER_NODE"]["value"])
    assert (env["NNODES"]["value"], env["PET_NNODES"]["value"]) == ("32:64", "32:64")
    assert env["WORLD_SIZE"]["value"] == f"{32 * procs}:{64 * procs}"
    assert (evaluation.outputs["nodes"], evaluation.outputs["worldSize"]) == ("32:64", f"{32 * procs}:{64 * procs}")
    assert env["RDZV_ID"]["value"].endswith(f"-32-64x{procs}")
    fixed = evaluated("prod", 64, kind)
    assert (fixed.outputs["nodes"], fixed.outputs["worldSize"]) == (64, 64 * procs)


def test_volcano_admits_an_elastic_world_once_its_minimum_fits():
    def pod_group(nodes: str) -> dict:
        evaluation = evaluated_with("dev", nodes=nodes, workload__kind="job", scheduling__gang__scheduler="volcano")
        return evaluation.one(POD_GROUP).manifest["spec"]

    elastic, of_its_minimum = pod_group("2:5"), pod_group("2")
    assert elastic["minMember"] == 2
    assert elastic["minResources"] == of_its_minimum["minResources"]


@pytest.mark.parametrize("kind", ["job", "jobset"])
def test_kueue_is_refused_for_an_elastic_world_it_would_never_grow(kind):
    """Kueue admits a world once, at a size it keeps (KEP-77: partial admission fixes a Job's
    parallelism at admission; its workload slices follow a parallelism someone else changes), so
    an elastic world under it would never grow toward its maximum: refused, naming `nodes` and the
    schedulers that grow it."""
    evaluation = evaluate(stack_config_with("dev", nodes="2:5", workload__kind=kind, scheduling__gang={"scheduler": "kueue", "queue": "team-a"}))
    assert evaluation.registered == []
    (problem,) = [p for p in evaluation.error.problems if p.key == "ddp-infra:nodes"]
    assert problem.given == "'2:5'"
    assert "Kueue admits a world once, at a size it never grows" in problem.allowed
    assert "use scheduler volcano, or kubernetes on a cluster serving scheduling.k8s.io/v1beta1" in problem.allowed
