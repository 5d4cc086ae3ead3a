"""The torchrun world one pod is in (PodWorld), from what Kubernetes gives the pod: its env and hostname.

Two env schemes are understood:
- the env this program gives its pods, the contract (trainer/pod/stack_env.py);
- the variables a platform injects into a pod this program did not make, as seed guide 000 names
  them: POD_NAME, SVC_NAME, POD_NUMS, POD_PORT, POD_NAMESPACE, JOB_NAME, JOB_COMPLETION_INDEX
  (trainer/pod/platform_env.py).
Every problem found is collected, so one error (WorldError) lists all of them. Pure: no I/O, no torch.
"""

from __future__ import annotations

from typing import Mapping

from trainer import contract as c
from trainer.pod.platform_env import world_from_platform_env
from trainer.pod.pod_world import PodWorld
from trainer.pod.stack_env import world_from_stack_env


def resolve_world(env: Mapping[str, str], hostname: str) -> PodWorld:
    """The world this pod belongs to, from its env and hostname alone; raises WorldError."""
    if c.NNODES.name not in env and c.LEGACY_POD_NUMS in env:  # no contract, a platform's pod count
        return world_from_platform_env(env, hostname)
    return world_from_stack_env(env, hostname)
