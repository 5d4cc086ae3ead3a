"""The Secret holding the Hugging Face token.

The token is the secret Output `Config.get_secret` returned; it goes into `stringData` still
wrapped, so Pulumi encrypts it in state and masks it in previews and logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi

from ..manifests import hf_token_secret_manifest
from ..world import World
from .base import Component
from .kubernetes_object import KubernetesObject


@dataclass(frozen=True)
class HfTokenSecretArgs:
    world: World
    token: pulumi.Output


class HfTokenSecret(Component):
    def __init__(self, name: str, args: HfTokenSecretArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("HfTokenSecret", name, opts)
        manifest = hf_token_secret_manifest(args.world, pulumi.Output.secret(args.token))
        self.secret = KubernetesObject(name, manifest, opts=self.child())
        self.register_outputs({"name": self.secret.metadata["name"]})
