"""The escape hatch (`pod.*` in the stack config) applied to the pod template the program builds.

In this order: the runtime class, the extra volumes and the trainer's extra mounts, the init
containers and then the sidecars (native sidecars: init containers with `restartPolicy: Always`,
which a Job's completion does not wait for), the root filesystem's read-only switch, and last the
`pod.templatePatch`, merged into the pod template the way `kubectl patch --type strategic` merges:
objects key by key, `null` removes a key, the lists Kubernetes merges by a key (containers,
volumes, env, ...) item by item, and every other list is replaced.

An extra container gets the trainer's no-escalation, drop-ALL security context unless it sets
those fields itself, so that the pods keep the restricted Pod Security level by default.

`owned_paths_in` names what a template patch may not touch: what the program derives (the
trainer's image, command, args, env, mounts and resources; the labels the selectors use; the
hostname, subdomain, service account and restart policy the world's DNS names and Job
semantics rest on) and what has a config key of its own.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Iterator

from .world import CONTAINER_NAME

if TYPE_CHECKING:
    from .config import StackConfig

RESERVED_LABEL_PREFIX = "app.kubernetes.io/"
# The key each list Kubernetes merges item by item is merged on (the API's patchMergeKey).
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "volumes": "name", "env": "name",
    "volumeMounts": "mountPath", "volumeDevices": "devicePath", "ports": "containerPort", "imagePullSecrets": "name",
    "hostAliases": "ip", "resourceClaims": "name", "readinessGates": "conditionType", "resizePolicy": "resourceName",
}  # fmt: skip
# Pod spec fields that have a config key of their own, so that each has one source of truth.
CONFIGURED_SPEC_FIELDS = {
    "runtimeClassName": "pod.runtimeClassName",
    "volumes": "pod.volumes",
    "initContainers": "pod.initContainers or pod.sidecars",
    "nodeSelector": "scheduling.nodeSelector",
    "tolerations": "scheduling.tolerations",
    "affinity": "scheduling.affinity",
    "priorityClassName": "scheduling.priorityClassName",
    "topologySpreadConstraints": "scheduling.topologySpread",
    "imagePullSecrets": "image.pullSecrets",
    "terminationGracePeriodSeconds": "workload.terminationGracePeriodSeconds",
}
# Pod spec fields the world rests on: rendezvous DNS names, Job semantics, the token-less account.
OWNED_SPEC_FIELDS = ("hostname", "subdomain", "setHostnameAsFQDN", "restartPolicy", "serviceAccountName", "serviceAccount")
# The trainer container's fields that the program derives, and where to change them instead.
OWNED_TRAINER_FIELDS = {
    "name": "nothing (the program names it)",
    "image": "image.name",
    "imagePullPolicy": "image.pullPolicy",
    "command": "nothing (the entrypoint turns the pod env into a torchrun world)",
    "args": "run.args",
    "env": "env",
    "envFrom": "env",
    "volumeMounts": "pod.volumeMounts",
    "resources": "resources, gpusPerNode or network.rdmaResources",
    "ports": "rendezvous.port",
}


def owned_paths_in(patch: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(path in the patch, what is allowed instead) for each place the patch touches what it may not."""
    for key in patch:
        if key not in ("metadata", "spec"):
            yield (key,), "metadata or spec of the pod template"
    metadata, spec = patch.get("metadata") or {}, patch.get("spec") or {}
    shapes = [(("metadata",), metadata, dict), (("spec",), spec, dict)]
    shapes += [(("metadata", "labels"), metadata.get("labels") or {}, dict)] if isinstance(metadata, dict) else []
    shapes += [(("spec", "containers"), spec.get("containers") or [], list)] if isinstance(spec, dict) else []
    misshapen = [(path, kind) for path, value, kind in shapes if not isinstance(value, kind)]
    if misshapen:
        for path, kind in misshapen:
            yield path, "an object" if kind is dict else "a list"
        return
    for key in metadata.get("labels") or {}:
        if key.startswith(RESERVED_LABEL_PREFIX):
            yield ("metadata", "labels", key), f"a label outside {RESERVED_LABEL_PREFIX} (the program sets those and selects on them)"
    for key in spec:
        if key in CONFIGURED_SPEC_FIELDS:
            yield ("spec", key), f"no value here: set {CONFIGURED_SPEC_FIELDS[key]}"
        elif key in OWNED_SPEC_FIELDS:
            yield ("spec", key), "no value here: the program sets it (the world's DNS names and restarts depend on it)"
    for index, container in enumerate(spec.get("containers") or []):
        name = container.get("name") if isinstance(container, dict) else None
        if name != CONTAINER_NAME:
            yield ("spec", "containers", index), f"the {CONTAINER_NAME!r} container (by name); add containers with pod.sidecars"
            continue
        for field, instead in OWNED_TRAINER_FIELDS.items():
            if field in container and field != "name":
                yield ("spec", "containers", index, field), f"no value here: set {instead}"
        if "readOnlyRootFilesystem" in (container.get("securityContext") or {}):
            yield ("spec", "containers", index, "securityContext", "readOnlyRootFilesystem"), "no value here: set pod.readOnlyRootFilesystem"
    yield from _directives(patch, ())


def _directives(node: Any, path: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """`$patch`, `$retainKeys`, ... : a plain merge only, so what a patch does can be read off it."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and key.startswith("$"):
                yield (*path, key), "plain fields only (a key set to null removes it)"
            else:
                yield from _directives(value, (*path, key))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _directives(item, (*path, index))


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


def _with_trainer_security(container: dict[str, Any], trainer: dict[str, Any]) -> dict[str, Any]:
    defaults = {key: trainer["securityContext"][key] for key in ("allowPrivilegeEscalation", "capabilities")}
    return {**copy.deepcopy(container), "securityContext": {**copy.deepcopy(defaults), **(container.get("securityContext") or {})}}


def apply_pod_extras(template: dict[str, Any], config: "StackConfig") -> dict[str, Any]:
    """The pod template with `config.pod` applied (a new dict)."""
    pod = config.pod
    template = copy.deepcopy(template)
    spec = template["spec"]
    trainer = next(container for container in spec["containers"] if container["name"] == CONTAINER_NAME)
    if pod.runtime_class_name:
        spec["runtimeClassName"] = pod.runtime_class_name
    spec["volumes"] = spec.get("volumes", []) + [copy.deepcopy(volume) for volume in pod.volumes]
    trainer["volumeMounts"] = trainer.get("volumeMounts", []) + [
        mount.model_dump(by_alias=True, exclude_none=True) for mount in pod.volume_mounts
    ]
    trainer["securityContext"]["readOnlyRootFilesystem"] = pod.read_only_root_filesystem
    extra = [_with_trainer_security(container, trainer) for container in pod.init_containers]
    extra += [{**_with_trainer_security(container, trainer), "restartPolicy": "Always"} for container in pod.sidecars]
    if extra:
        spec["initContainers"] = spec.get("initContainers", []) + extra
    if pod.template_patch:
        template = strategic_merge(template, pod.template_patch)
    return template
