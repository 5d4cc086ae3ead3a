"""One Kubernetes object of the program, registered from its manifest.

Every object is built as a plain manifest first (ddp_infra.manifests, ddp_infra.workload). It is
registered here as the resource pulumi-kubernetes' typed class of its kind registers: the same type
token (`kubernetes:batch/v1:Job`, `kubernetes:core/v1:Namespace`), the same inputs (the manifest's
fields), the plugin version of the installed SDK, and a Secret's data kept secret in its outputs.
The typed classes are not imported: pulumi_kubernetes loads an API group's input and output types
on first use of any class of the group (about 0.8 s for the five groups here, on every preview and
up), for typing that the program's manifests, dicts already, never use.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi_kubernetes import _utilities

from ..stand_ins import swapped
from .base import with_former_name

# The fields the provider returns that the program reads (`obj.metadata["name"]`), besides the inputs.
OUTPUT_FIELDS = ("metadata", "status")
# A Secret's fields that its typed class keeps secret in the resource's outputs.
SECRET_FIELDS = {"Secret": ["data", "stringData"]}


def type_token(api_version: str, kind: str) -> str:
    """The Pulumi type of a kind: `v1` is the core group, `kubernetes:core/v1:<kind>`."""
    return f"kubernetes:{api_version if '/' in api_version else f'core/{api_version}'}:{kind}"


class KubernetesObject(pulumi.CustomResource):
    metadata: pulumi.Output[Any]

    def __init__(self, name: str, manifest: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None):
        kind = manifest["kind"]
        defaults = pulumi.ResourceOptions(
            version=_utilities.get_version(), additional_secret_outputs=SECRET_FIELDS.get(kind)
        )
        props = {**dict.fromkeys(OUTPUT_FIELDS), **swapped(manifest)}  # an image handed in as an Output, in place
        options = pulumi.ResourceOptions.merge(defaults, with_former_name(name, opts))
        super().__init__(type_token(manifest["apiVersion"], kind), name, props, options)
