"""A changed secret value the pods read is a changed pod template.

Pods read `hfToken` and `secretEnv` through secretKeyRef env, once, when their containers start: a
value changed in the stack's Secret reaches no pod of a running world, and a world that failed on
a wrong credential (a data source's object store refusing it) would stay failed after the fix. The
digest of the values, an annotation of the pod template, makes a changed value a changed template,
which replaces the world's workload as any change of it does (the world resumes from its
checkpoint). The digest is a secret Output itself: a short password's SHA-256 can be searched for.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Optional

import pulumi

from .config import StackConfig
from .names import SECRETS_DIGEST_ANNOTATION


def secret_values(config: StackConfig) -> dict[str, pulumi.Output]:
    """Every secret value the pods read, by its config key."""
    values: dict[str, Optional[pulumi.Output]] = {"hfToken": config.hf_token}
    values.update({f"secretEnv.{name}": value for name, value in config.secret_env.items()})
    return {key: value for key, value in values.items() if value is not None}


def with_secrets_digest(template: dict[str, Any], secrets: dict[str, pulumi.Output]) -> dict[str, Any]:
    if not secrets:
        return template
    keys = sorted(secrets)
    digest = pulumi.Output.all(*(secrets[key] for key in keys)).apply(
        lambda values: hashlib.sha256(json.dumps(dict(zip(keys, values)), sort_keys=True).encode()).hexdigest()
    )
    metadata = template["metadata"]
    annotations = {**metadata.get("annotations", {}), SECRETS_DIGEST_ANNOTATION: pulumi.Output.secret(digest)}
    return {**template, "metadata": {**metadata, "annotations": annotations}}
