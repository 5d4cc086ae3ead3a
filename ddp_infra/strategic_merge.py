"""`pod.templatePatch` merged into the pod template the way `kubectl patch --type strategic` merges:
objects key by key, `null` removes a key, the lists Kubernetes merges by a key (containers,
volumes, env, ...) item by item, and every other list is replaced. What a patch may touch is
checked where the config is read (ddp_infra/config/pod.py, `owned_paths_in`).
"""

from __future__ import annotations

import copy
from typing import Any

# The key each list Kubernetes merges item by item is merged on (the API's patchMergeKey).
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "volumes": "name", "env": "name",
    "volumeMounts": "mountPath", "volumeDevices": "devicePath", "ports": "containerPort", "imagePullSecrets": "name",
    "hostAliases": "ip", "resourceClaims": "name", "readinessGates": "conditionType", "resizePolicy": "resourceName",
}  # fmt: skip


def strategic_merge(base: Any, patch: Any, field: str | None = None) -> Any:
    """`patch` merged into `base` (neither is changed)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = copy.deepcopy(base)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = strategic_merge(base[key], value, key) if key in base else copy.deepcopy(value)
        return merged
    merge_key = MERGE_KEYS.get(field or "")
    if merge_key and isinstance(base, list) and isinstance(patch, list) and all(isinstance(item, dict) for item in base + patch):
        merged = copy.deepcopy(base)
        for item in patch:
            at = next((i for i, existing in enumerate(merged) if existing.get(merge_key) == item.get(merge_key)), None)
            if at is None:
                merged.append(copy.deepcopy(item))
            else:
                merged[at] = strategic_merge(merged[at], item)
        return merged
    return copy.deepcopy(patch)
