"""What every component of the program shares."""

from __future__ import annotations

from typing import Any, Callable, Optional

import pulumi

TYPE_PREFIX = "ddp-infra:training"

# A resource's name in an earlier layout of the same world (None: the same name), for its alias.
FormerName = Callable[[str], Optional[str]]


def with_former_name(name: str, opts: Optional[pulumi.ResourceOptions]) -> Optional[pulumi.ResourceOptions]:
    """`opts` plus an alias to the name this resource had in an earlier layout, when its parent's
    world was deployed by one (DdpTrainingWorldArgs.previous_layout): the engine then takes the
    resource in the state under the old name for this one, and nothing is replaced."""
    former_name: Optional[FormerName] = getattr(opts.parent, "former_name", None) if opts else None
    old = former_name(name) if former_name else None
    if not old or old == name:
        return opts
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(aliases=[pulumi.Alias(name=old)]))


class Component(pulumi.ComponentResource):
    """A ComponentResource whose type token is `ddp-infra:training:<kind>` (or `type_`)."""

    def __init__(self, kind: str, name: str, opts: Optional[pulumi.ResourceOptions], type_: Optional[str] = None) -> None:
        if not hasattr(self, "former_name"):  # a world sets its own before this; the others take their parent's
            self.former_name: Optional[FormerName] = getattr(opts.parent, "former_name", None) if opts else None
        super().__init__(type_ or f"{TYPE_PREFIX}:{kind}", name, None, with_former_name(name, opts))
        # Children do not inherit their parent's depends_on: pass it on, so that what the
        # component waits for (the namespace, the claims, ...) is what its objects wait for.
        depends_on = opts.depends_on if opts else None
        self._waits_for: list[pulumi.Resource] = list(depends_on) if isinstance(depends_on, list) else []

    def child(self, *after: pulumi.Resource, **options: Any) -> pulumi.ResourceOptions:
        """Options for a resource owned by this component, created after `after` (its siblings)."""
        return pulumi.ResourceOptions(parent=self, depends_on=[*self._waits_for, *after], **options)
