"""What every component of the program shares."""

from __future__ import annotations

from typing import Any, Optional

import pulumi

TYPE_PREFIX = "ddp-infra:training"


class Component(pulumi.ComponentResource):
    """A ComponentResource whose type token is `ddp-infra:training:<kind>`."""

    def __init__(self, kind: str, name: str, opts: Optional[pulumi.ResourceOptions]) -> None:
        super().__init__(f"{TYPE_PREFIX}:{kind}", name, None, opts)
        # Children do not inherit their parent's depends_on: pass it on, so that what the
        # component waits for (the namespace, the claims, ...) is what its objects wait for.
        depends_on = opts.depends_on if opts else None
        self._waits_for: list[pulumi.Resource] = list(depends_on) if isinstance(depends_on, list) else []

    def child(self, *after: pulumi.Resource, **options: Any) -> pulumi.ResourceOptions:
        """Options for a resource owned by this component, created after `after` (its siblings)."""
        return pulumi.ResourceOptions(parent=self, depends_on=[*self._waits_for, *after], **options)
