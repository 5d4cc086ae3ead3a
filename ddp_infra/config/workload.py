"""`run` and `workload`: what the world trains, and which Kubernetes workload runs its pods."""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, Field

from trainer import contract

from .scalars import Duration, Model, WorkloadName, pattern


class RunConfig(Model):
    name: Optional[Annotated[str, AfterValidator(pattern(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", "1-63 of A-Z a-z 0-9 . _ -, starting alphanumeric"))]] = Field(
        None, description="Run directory under /out; stable so a restart resumes (unset: the workload name)."
    )
    args: tuple[str, ...] = Field(
        contract.DEFAULT_TRAIN_ARGS, min_length=1, description="What you would write after `torchrun`: script or -m module and its arguments."
    )


class WorkloadConfig(Model):
    kind: Literal[contract.WORKLOAD_KINDS] = Field(  # type: ignore[valid-type]
        contract.INDEXED_JOB,
        description="job (an Indexed Job that runs to completion), statefulset (pods kept up, restarted after the run ends) or jobset (a JobSet of one Indexed Job: any pod's failure restarts the whole world; needs the JobSet controller).",
    )
    name: WorkloadName = Field("trainer", description="Name of the StatefulSet, Job or JobSet; the Service is <name>-rdzv.")
    wait_for_ready: bool = Field(
        False, description="Make `pulumi up` wait for every pod to be Ready (job: for the Job to complete)."
    )
    ready_timeout: Duration = Field("30m", description="How long `pulumi up` waits when waitForReady is true.")
    termination_grace_period_seconds: int = Field(
        120, ge=0, le=3600, description="Time a pod gets after SIGTERM to write a checkpoint."
    )
    max_unavailable: int = Field(
        1, ge=0, le=100000,
        description="Healthy pods a voluntary disruption (a node drain) may evict at once; each stops the world at a checkpoint and it re-forms. 0: drains wait for the run to end.",
    )
    backoff_limit: int = Field(
        3, ge=0, le=100,
        description="job: pod failures (crashes, OOM kills, SIGKILL; not evictions or SIGTERM stops) before the Job fails; jobset: restarts of the whole world (after any pod's failure) before the JobSet fails.",
    )
    ttl_seconds_after_finished: int = Field(
        86400, ge=0, le=30 * 86400, description="job, jobset: seconds a finished Job or JobSet and its pods are kept."
    )
