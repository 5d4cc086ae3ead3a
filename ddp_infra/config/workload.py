"""`run` and `workload`: what the world trains, and which Kubernetes workload runs its pods."""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, Field, model_validator

from trainer import contract

from .nodes import MAX_NODES
from .scalars import Model, WorkloadName, field_problem, pattern


class RunConfig(Model):
    name: Optional[Annotated[str, AfterValidator(pattern(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", "1-63 of A-Z a-z 0-9 . _ -, starting alphanumeric"))]] = Field(
        None, description="Run directory under /out; stable so a restart resumes (unset: the workload name)."
    )
    args: tuple[str, ...] = Field(
        contract.DEFAULT_TRAIN_ARGS, min_length=1, description="What you would write after `torchrun`: script or -m module and its arguments."
    )


_DAY = 86400


class HangTimeoutConfig(Model):
    floor_seconds: int = Field(
        contract.HANG_FLOOR_SECONDS, ge=5, le=3600,
        description=f"HANG_TIMEOUT_FLOOR: the least time without training progress that counts as a hang ({contract.HANG_BOUND_RULE}).",
    )
    ceiling_seconds: int = Field(
        contract.HANG_CEILING_SECONDS, ge=0, le=_DAY,
        description="HANG_TIMEOUT_CEILING: the most time without training progress before the world is torn down and re-formed from its newest checkpoint. 0: no hang detection.",
    )

    @model_validator(mode="after")
    def _ceiling_not_below_the_floor(self) -> "HangTimeoutConfig":
        if self.ceiling_seconds and self.ceiling_seconds < self.floor_seconds:
            raise field_problem(
                ("ceilingSeconds",), f"0 (off) or an integer from floorSeconds ({self.floor_seconds}) to {_DAY}", self.ceiling_seconds
            )
        return self


class LivenessConfig(Model):
    seconds: int = Field(
        20, ge=0, le=3600,
        description="A pod whose entrypoint answers no liveness probe for this long (its every process frozen: stuck in "
        "the kernel, a hung driver call) is killed and replaced (a StatefulSet's restarts in place), where Kubernetes "
        "would call it Running and the world would wait for it. Probed every 5 s (every seconds/2 below 10). 0: no probe.",
    )
    port: int = Field(
        29501, ge=1024, le=65535, description="LIVENESS_PORT: where the entrypoint answers the probe (GET /healthz); not rendezvous.port."
    )


class WorkloadConfig(Model):
    kind: Literal[contract.WORKLOAD_KINDS] = Field(  # type: ignore[valid-type]
        contract.INDEXED_JOB,
        description="job (an Indexed Job that runs to completion), statefulset (pods kept up, restarted after the run ends) or jobset (a JobSet of one Indexed Job: any pod's failure restarts the whole world; needs the JobSet controller).",
    )
    name: WorkloadName = Field("trainer", description="Name of the StatefulSet, Job or JobSet; the Service is <name>-rdzv.")
    wait_for: Literal["none", "admitted", "running"] = Field(
        "admitted",
        description="What `pulumi up` waits for once the workload is deployed, saying meanwhile why the world waits, and "
        "ends with the world's state in one line (the worldState output): none (one look), admitted (the least pods it "
        "trains with placed on nodes, past any queue) or running (that many pods running).",
    )
    wait_seconds: int = Field(
        120, ge=1, le=_DAY, description="The most seconds `pulumi up` waits for waitFor; a world not there by then is a warning with its reason."
    )
    wait_failure: Literal["warn", "error"] = Field(
        "warn", description="What a world that did not get to waitFor within waitSeconds, or that failed, makes of `pulumi up`: a warning, or an error that fails it."
    )
    termination_grace_period_seconds: int = Field(
        120, ge=0, le=3600, description="Time a pod gets after SIGTERM to write a checkpoint."
    )
    max_unavailable: int = Field(
        1, ge=0, le=100000,
        description="Healthy pods a voluntary disruption (a node drain) may evict at once; each stops the world at a checkpoint and it re-forms. 0: drains wait for the run to end.",
    )
    spare_pods: int = Field(
        0, ge=0, le=MAX_NODES,
        description="job, jobset: pods beyond `nodes` that start with the world and wait in its rendezvous; when a pod is "
        "lost one takes its place at once, where the Job would create its replacement only after its back-off "
        "(10 s, doubling with each loss). The world keeps its size, so the run's result is unchanged.",
    )
    backoff_limit: int = Field(
        3, ge=0, le=100,
        description="job: pod failures (crashes, OOM kills, SIGKILL; not evictions or SIGTERM stops) before the Job fails; jobset: restarts of the whole world (after any pod's failure) before the JobSet fails.",
    )
    ttl_seconds_after_finished: int = Field(
        86400, ge=0, le=30 * 86400, description="job, jobset: seconds a finished Job or JobSet and its pods are kept."
    )
    liveness: LivenessConfig = Field(
        LivenessConfig(), description="The kubelet's liveness probe of each training pod: a frozen pod is killed, not waited for."
    )
    hang_timeout: HangTimeoutConfig = Field(
        HangTimeoutConfig(),
        description="When a rank without training progress counts as hung: the world is then torn down and re-formed from its newest checkpoint.",
    )
