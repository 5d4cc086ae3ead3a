"""The Secret holding the Hugging Face token.

The token is the secret Output `Config.get_secret` returned; it goes into `stringData` still
wrapped, so Pulumi encrypts it in state and masks it in previews and logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from ..manifests import hf_token_secret_metadata
from ..world import HF_TOKEN_SECRET_KEY, World
from .base import Component


@dataclass(frozen=True)
class HfTokenSecretArgs:
    world: World
    token: pulumi.Output


class HfTokenSecret(Component):
    def __init__(self, name: str, args: HfTokenSecretArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("HfTokenSecret", name, opts)
        self.secret = k8s.core.v1.Secret(
            name,
            metadata=hf_token_secret_metadata(args.world),
            type="Opaque",
            string_data={HF_TOKEN_SECRET_KEY: pulumi.Output.secret(args.token)},
            opts=self.child(),
        )
        self.register_outputs({"name": self.secret.metadata["name"]})
