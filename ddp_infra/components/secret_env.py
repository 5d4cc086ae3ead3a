"""The Secret holding `secretEnv`'s values, one key per env var name.

A Secret of its own rather than more keys in the token's: the token's Secret keeps its name and
data whatever is added here, and each Secret exists only when its config does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi

from ..manifests import env_secret_manifest
from ..world import World
from .base import Component
from .kubernetes_object import KubernetesObject


@dataclass(frozen=True)
class SecretEnvArgs:
    world: World
    values: dict[str, pulumi.Output]  # secret Outputs by env var name


class SecretEnv(Component):
    def __init__(self, name: str, args: SecretEnvArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("SecretEnv", name, opts)
        self.secret = KubernetesObject(name, env_secret_manifest(args.world, args.values), opts=self.child())
        self.register_outputs({"name": self.secret.metadata["name"]})
