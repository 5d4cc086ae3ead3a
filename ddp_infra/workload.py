"""The training workload, as plain Kubernetes dicts: a StatefulSet, an Indexed Job or a JobSet of one
Indexed Job, each running the world's one pod template (ddp_infra.pod).

Pure functions of the `World` and that template: no Pulumi here.
"""

from __future__ import annotations

from typing import Any

from trainer import contract

from . import gang
from .names import CONTAINER_NAME, JOBSET_API_VERSION, WAIT_FOR_ANNOTATION
from .world import World

# What the provider waits for: the controller has taken the workload (`up` then waits for the world
# itself as workload.waitFor says: ddp_infra/world_wait.py). skipAwait would be quicker, but it also
# skips waiting for a replaced world's deletion.
ACCEPTED = {
    contract.STATEFULSET: "jsonpath={.status.observedGeneration}",
    contract.INDEXED_JOB: "jsonpath={.status.startTime}",
    contract.JOBSET: "jsonpath={.status.replicatedJobsStatus}",
}
# A Job or JobSet that waits suspended in a Kueue queue has neither until Kueue admits it, which
# may take hours: `up` waits for what its controller writes to a suspended one.
# (A JobSet's controller writes its Jobs' status while they are suspended too.)
ACCEPTED_SUSPENDED = {contract.INDEXED_JOB: "jsonpath={.status.conditions}", contract.JOBSET: ACCEPTED[contract.JOBSET]}


def workload_metadata(world: World) -> dict[str, Any]:
    annotations = {**world.extra_annotations, **gang.workload_annotations(world)}
    if world.workload_kind == contract.INDEXED_JOB:
        annotations |= gang.job_annotations(world)
    accepted = ACCEPTED_SUSPENDED if gang.starts_suspended(world) else ACCEPTED
    annotations[WAIT_FOR_ANNOTATION] = accepted[world.workload_kind]
    metadata: dict[str, Any] = {
        "name": world.workload_name,
        "namespace": world.namespace,
        "labels": {**world.labels(CONTAINER_NAME), **gang.workload_labels(world)},
    }
    if annotations:
        metadata["annotations"] = annotations
    return metadata


def statefulset_manifest(world: World, template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": workload_metadata(world),
        "spec": {
            "replicas": world.nnodes,
            # All pods start at once: rendezvous needs the whole world, not one pod at a time.
            "podManagementPolicy": "Parallel",
            "serviceName": world.service_name,
            "selector": {"matchLabels": world.selector},
            "template": template,
        },
    }


def job_manifest(world: World, template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": workload_metadata(world),
        "spec": {
            **_pods_replaced_one_by_one(world, template),
            "ttlSecondsAfterFinished": world.config.workload.ttl_seconds_after_finished,
            **_suspended(world),
        },
    }


def _pods_replaced_one_by_one(world: World, template: dict[str, Any]) -> dict[str, Any]:
    """An Indexed Job of one pod per node whose lost pods are replaced, each on its own.

    A world formed from any of its pods (elastic, or with spares) ends when any pod succeeds: a pod
    exits 0 only once the run is done (every rank leaves together, ddp_infra's trainer at its
    closing barrier), and an index whose pod never trained (a spare, or a pod with no room while
    the world trained smaller) must not start a world of its own after it.
    """
    spec: dict[str, Any] = {
        **_indexed(world),
        "backoffLimit": world.config.workload.backoff_limit,
        # A replacement pod starts only once the failed one is gone, so an index is never doubled.
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {"rules": _pod_failure_rules()},
        "template": template,
    }
    if world.forms_from_any_pods:
        spec["successPolicy"] = {"rules": [{"succeededCount": 1}]}
    return spec


def _indexed(world: World) -> dict[str, Any]:
    """One pod per node and per spare, each of its own index."""
    return {"completionMode": "Indexed", "completions": world.pods, "parallelism": world.pods}


def _suspended(world: World) -> dict[str, Any]:
    return {"suspend": True} if gang.starts_suspended(world) else {}


def jobset_manifest(world: World, template: dict[str, Any]) -> dict[str, Any]:
    """A JobSet of one Indexed Job, one pod per node.

    Any pod's failure fails the Job at once (backoffLimit 0), and the JobSet restarts the whole
    world, which resumes from its checkpoint, up to `workload.backoffLimit` times. The old world's
    pods are gone (each wrote its SIGTERM checkpoint) before the new one starts (BlockingRecreate),
    so two worlds never write one run. The Job of a world formed from any of its pods is the plain
    Job's instead: the world goes on smaller, or with a spare, while a lost pod is replaced. A pod env that describes no world fails the JobSet at once.
    The JobSet's network uses the stack's own headless Service, which exists before it.
    """
    job = contract.JOBSET_REPLICATED_JOB
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": workload_metadata(world),
        "spec": {
            "network": {"enableDNSHostnames": True, "subdomain": world.service_name, "publishNotReadyAddresses": True},
            "replicatedJobs": [{
                "name": job,
                "replicas": 1,
                "template": {
                    "metadata": {"labels": world.labels(CONTAINER_NAME), **_annotations(gang.job_annotations(world))},
                    "spec": _pods_replaced_one_by_one(world, template) if world.forms_from_any_pods else {
                        **_indexed(world),
                        "backoffLimit": 0,
                        "podFailurePolicy": {"rules": [_fail_job_on_bad_env()]},
                        "template": template,
                    },
                },
            }],
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [job]},
            "failurePolicy": {
                # such a world's Job replaces its lost pods itself (workload.backoffLimit of them)
                "maxRestarts": 0 if world.forms_from_any_pods else world.config.workload.backoff_limit,
                "restartStrategy": "BlockingRecreate",
                # The Job's only pod failure policy that fails it is the bad env's: no restart can fix that.
                "rules": [{"name": "pod_env_describes_no_world", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
            },
            "ttlSecondsAfterFinished": world.config.workload.ttl_seconds_after_finished,
            **_suspended(world),
        },
    }  # fmt: skip


def _annotations(annotations: dict[str, str]) -> dict[str, Any]:
    return {"annotations": annotations} if annotations else {}


def _exit_codes(code: int) -> dict[str, Any]:
    return {"containerName": CONTAINER_NAME, "operator": "In", "values": [code]}


def _fail_job_on_bad_env() -> dict[str, Any]:
    return {"action": "FailJob", "onExitCodes": _exit_codes(contract.EXIT_BAD_ENV)}


def _pod_failure_rules() -> list[dict[str, Any]]:
    """Which pod failures end the run.

    An evicted, preempted or deleted pod checkpoints on SIGTERM and exits 143: it is replaced and the
    world resumes, without counting against backoffLimit. A pod env that describes no world fails
    the Job at once. Anything else (a crash, an OOM kill, a SIGKILL) counts.
    """
    return [
        _fail_job_on_bad_env(),
        {"action": "Ignore", "onExitCodes": _exit_codes(contract.EXIT_TERMINATED)},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]


def workload_manifest(world: World, template: dict[str, Any]) -> dict[str, Any]:
    """The workload of the world's kind, running `template` (ddp_infra.pod.pod_template)."""
    if world.workload_kind == contract.INDEXED_JOB:
        return job_manifest(world, template)
    if world.workload_kind == contract.JOBSET:
        return jobset_manifest(world, template)
    return statefulset_manifest(world, template)
