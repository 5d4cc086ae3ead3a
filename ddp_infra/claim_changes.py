"""Refuse a claim change that Kubernetes cannot make in place, before a claim or the workload is registered.

Once a claim exists its storage class and access modes are fixed: pulumi-kubernetes plans a
replace when either changes, and the API server refuses to shrink a claim. A replace deletes an
unretained claim's data; a retained claim cannot be replaced at all (the old one stays under the
same name), so `pulumi up` would stop halfway, after the workload was already being replaced.

The stack records the claims it creates in its `claims` output. The next run reads that record
back through a StackReference to the stack itself (components.training_world.last_deployment) and stops
with what changed and what to do instead, while a preview still shows it. Growing a claim is an
in-place update; a new claim name is a new claim, and neither is refused.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import pulumi

from .config import StorageConfig, parse_quantity
from .names import PROJECT
from .stand_ins import swapped

CLAIMS_OUTPUT = "claims"


class ClaimChangeRefused(pulumi.RunError):
    """A RunError, so Pulumi reports the message alone, without a stack trace."""


def recorded_claims(storage: StorageConfig, namespace: str) -> dict[str, dict[str, Any]]:
    """What the `claims` output records of each claim the stack creates, by volume role."""
    return {
        role: {
            "claim": f"{namespace}/{volume.claim_name}",
            "storageClass": volume.storage_class,
            "accessMode": volume.access_mode,
            "size": volume.size,
        }
        for role, volume in storage.volumes().items()
        if volume.create
    }


def claim_change_problems(previous: Mapping[str, Any], records: Mapping[str, Any]) -> list[str]:
    """Each change from the `previous` record to `records` (recorded_claims, a value handed in as an
    Output resolved) that the claim it names cannot take."""
    problems = []
    for role, now in records.items():
        was = previous.get(role)
        if not was or was.get("claim") != now["claim"]:
            continue  # a claim the last deployment did not have: created, not changed
        key = f"{PROJECT}:storage.{role}"
        for field in ("storageClass", "accessMode"):
            if was.get(field) != now[field]:
                problems.append(f"{key}.{field}: {_shown(was.get(field))} -> {_shown(now[field])} would replace "
                                f"claim {now['claim']} ({field} is fixed once a claim exists)")  # fmt: skip
        if was.get("size") and parse_quantity(now["size"]) < parse_quantity(was["size"]):
            problems.append(f"{key}.size: {_shown(was['size'])} -> {_shown(now['size'])} would shrink claim "
                            f"{now['claim']} (Kubernetes only grows claims)")  # fmt: skip
    return problems


def refuse_claim_changes(
    storage: StorageConfig, namespace: str, last_deployment: pulumi.StackReference, output: str = CLAIMS_OUTPUT
) -> pulumi.Output[None]:
    """Resolves once the claims may be registered (as the last deployment's `output` recorded
    them); fails with ClaimChangeRefused otherwise."""

    def check(recorded: Optional[Mapping[str, Any]], records: Mapping[str, Any]) -> None:
        problems = claim_change_problems(recorded or {}, records)
        if problems:
            raise ClaimChangeRefused(
                "refused: a claim cannot take this change in place; nothing was changed:\n  "
                + "\n  ".join(problems)
                + f"\n  to fix: set the value back; or, to move to a new claim, also give it a new "
                f"`{PROJECT}:storage.<role>.claimName` (the old claim stays in the cluster while it is retained: "
                "copy its data over, then delete it yourself)"
            )

    records = swapped(recorded_claims(storage, namespace))  # a storage class handed in, by its value
    return pulumi.Output.all(last_deployment.get_output(output), records).apply(lambda both: check(*both))


def _shown(value: Optional[str]) -> str:
    return "(not set: the cluster's default class)" if value is None else repr(value)
