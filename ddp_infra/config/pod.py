"""`pod`: the escape hatch. What the program does not model, validated all the same.

Extra volumes and mounts, init containers and native sidecars, the runtime class, and a
strategic-merge `templatePatch` of the pod template for anything else. None may take a name or a
path the program uses, and the patch may not touch what the program owns (`owned_paths_in`): what
it derives (the trainer's image, command, args, env, mounts and resources; the labels the
selectors use; the hostname, subdomain, service account and restart policy the world's DNS names
and Job semantics rest on) and what has a config key of its own.
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated, Any, Iterator, Optional

from pydantic import AfterValidator, Field, model_validator

from ..names import CONTAINER_NAME, PROGRAM_CONTAINERS, PROGRAM_MOUNT_PATHS, PROGRAM_VOLUMES, RESERVED_LABEL_PREFIX
from .scalars import IMAGE_REFERENCE, DnsLabel, DnsSubdomain, Model, field_problem, is_image_reference, pattern

# Fields of a Kubernetes Container an extra container may set (restartPolicy is the program's: it
# makes a sidecar a sidecar).
CONTAINER_FIELDS = (
    "name", "image", "imagePullPolicy", "command", "args", "workingDir", "env", "envFrom", "ports", "resources",
    "resizePolicy", "volumeMounts", "volumeDevices", "securityContext", "livenessProbe", "readinessProbe",
    "startupProbe", "lifecycle", "terminationMessagePath", "terminationMessagePolicy", "stdin", "stdinOnce", "tty",
)  # fmt: skip
# The sources a Kubernetes Volume can have (exactly one per volume).
VOLUME_SOURCES = (
    "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "configMap", "csi", "downwardAPI",
    "emptyDir", "ephemeral", "fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs",
    "hostPath", "image", "iscsi", "nfs", "persistentVolumeClaim", "photonPersistentDisk", "portworxVolume",
    "projected", "quobyte", "rbd", "scaleIO", "secret", "storageos", "vsphereVolume",
)  # fmt: skip
AbsolutePath = Annotated[
    str, AfterValidator(pattern(r"/[^\s:]*", "an absolute path without spaces or ':', e.g. /var/log/trainer"))
]
# The API server refuses a subPath that is absolute or steps up ('..'): it must stay inside its volume.
SubPath = Annotated[
    str, AfterValidator(pattern(r"(?!/)(?!(.*/)?\.\.(/|$)).+", "a relative path without '..' in it, e.g. logs/rank-0"))
]


# Labels the Job controller sets on its pods: the API server refuses a Job whose template sets one of
# those its selector matches (controller-uid, job-name, and their batch.kubernetes.io/ names), and the
# controller overwrites the others. Refused whatever the kind, so a stack keeps its labels when its
# workload.kind changes.
JOB_CONTROLLER_LABELS = ("controller-uid", "job-name")
JOB_CONTROLLER_LABEL_PREFIX = "batch.kubernetes.io/"
NOT_A_JOB_CONTROLLER_LABEL = (
    f"a key other than the Job controller's ({', '.join(JOB_CONTROLLER_LABELS)}, {JOB_CONTROLLER_LABEL_PREFIX}...), which it sets on its pods"
)


NOT_A_PROGRAM_LABEL = f"a key outside {RESERVED_LABEL_PREFIX} (the program sets those and selects on them)"


def label_key_problem(key: str) -> str | None:
    """What a label key the user sets on the pods must be instead (None where it may be set): the
    program's own keys and the Job controller's are theirs."""
    if key.startswith(RESERVED_LABEL_PREFIX):
        return NOT_A_PROGRAM_LABEL
    if key in JOB_CONTROLLER_LABELS or key.startswith(JOB_CONTROLLER_LABEL_PREFIX):
        return NOT_A_JOB_CONTROLLER_LABEL
    return None


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
        if allowed := label_key_problem(key):
            yield ("metadata", "labels", key), allowed
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


def _check_container(container: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(container) - set(CONTAINER_FIELDS))
    if unknown:
        raise field_problem((unknown[0],), f"a Container field: {', '.join(CONTAINER_FIELDS)}", container[unknown[0]])
    for field in ("name", "image"):
        if not isinstance(container.get(field), str) or not container[field]:
            raise field_problem((field,), f"a {'DNS-1123 label' if field == 'name' else 'image reference'} (required)", container.get(field))
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", container["name"]):
        raise field_problem(("name",), "a DNS-1123 label: lowercase a-z, 0-9, '-', at most 63", container["name"])
    if not is_image_reference(container["image"]):
        raise field_problem(("image",), IMAGE_REFERENCE, container["image"])
    return container


def _check_volume(volume: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(volume.get("name"), str) or not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", volume["name"]):
        raise field_problem(("name",), "a DNS-1123 label: lowercase a-z, 0-9, '-', at most 63", volume.get("name"))
    sources = sorted(set(volume) - {"name"})
    if len(sources) != 1 or sources[0] not in VOLUME_SOURCES:
        raise field_problem(
            tuple(sources[-1:]), f"exactly one volume source besides name: {', '.join(VOLUME_SOURCES)}", sources or None
        )
    return volume


def _check_template_patch(patch: dict[str, Any]) -> dict[str, Any]:
    for path, why in owned_paths_in(patch):
        raise field_problem(path, why, _lookup(patch, path))
    return patch


_check_container.allowed = "a Kubernetes Container: name, image, and its other fields but restartPolicy"  # type: ignore[attr-defined]
_check_volume.allowed = "a Kubernetes Volume: name and one source"  # type: ignore[attr-defined]
_check_template_patch.allowed = "metadata and spec of a pod template, as a strategic-merge patch"  # type: ignore[attr-defined]
ExtraContainer = Annotated[dict[str, Any], AfterValidator(_check_container)]
ExtraVolume = Annotated[dict[str, Any], AfterValidator(_check_volume)]


class ExtraMount(Model):
    name: DnsLabel = Field(description="A volume of pod.volumes (or the program's: datasets, outputs, models, dshm, tmp).")
    mount_path: AbsolutePath = Field(description="Where it appears in the trainer container.")
    read_only: bool = Field(False, description="Mount read-only.")
    sub_path: Optional[SubPath] = Field(None, description="A path inside the volume to mount instead of its root.")


class PodConfig(Model):
    runtime_class_name: Optional[DnsSubdomain] = Field(
        None, description="RuntimeClass of the pods, e.g. nvidia (unset: the cluster's default runtime)."
    )
    volumes: tuple[ExtraVolume, ...] = Field((), description="Extra pod volumes, as Kubernetes writes them: a name and one source.")
    volume_mounts: tuple[ExtraMount, ...] = Field((), description="Extra mounts in the trainer container.")
    init_containers: tuple[ExtraContainer, ...] = Field(
        (), description="Containers that run to completion before the trainer starts, as Kubernetes writes them."
    )
    sidecars: tuple[ExtraContainer, ...] = Field(
        (),
        description="Containers that run beside the trainer for the pod's life (log shippers, bucket mounters): "
        "native sidecars, init containers with restartPolicy Always (Kubernetes 1.29+).",
    )
    read_only_root_filesystem: bool = Field(
        True, description="The trainer container's root filesystem is read-only; false where a GPU runtime hook must write to it."
    )
    template_patch: Optional[Annotated[dict[str, Any], AfterValidator(_check_template_patch)]] = Field(
        None,
        description="A strategic-merge patch of the pod template (metadata, spec) for anything else; "
        "it may not touch what the program owns (see docs/architecture.md).",
    )

    @model_validator(mode="after")
    def _names_are_unique_and_the_programs_are_kept(self) -> "PodConfig":
        names = [volume["name"] for volume in self.volumes]
        for index, name in enumerate(names):
            if name in PROGRAM_VOLUMES or name in names[:index]:
                raise field_problem(
                    ("volumes", index, "name"), f"a name not used by another volume ({', '.join(PROGRAM_VOLUMES)} are the program's)", name
                )
        known = set(names) | set(PROGRAM_VOLUMES)
        paths = [_normalized(mount.mount_path) for mount in self.volume_mounts]
        for index, mount in enumerate(self.volume_mounts):
            if mount.name not in known:
                raise field_problem(("volumeMounts", index, "name"), "the name of a volume of pod.volumes or of the program's", mount.name)
            if paths[index] in PROGRAM_MOUNT_PATHS or paths[index] in paths[:index]:
                raise field_problem(
                    ("volumeMounts", index, "mountPath"),
                    f"a path no other mount uses ({', '.join(PROGRAM_MOUNT_PATHS)} are the program's)", mount.mount_path,
                )
        containers = [("initContainers", i, c) for i, c in enumerate(self.init_containers)]
        containers += [("sidecars", i, c) for i, c in enumerate(self.sidecars)]
        if not containers:
            return self
        seen = set(PROGRAM_CONTAINERS)
        for key, index, container in containers:
            if container["name"] in seen:
                raise field_problem((key, index, "name"), f"a name no other container has ({', '.join(PROGRAM_CONTAINERS)} are the program's)",
                                    container["name"])  # fmt: skip
            seen.add(container["name"])
            for mount_index, mount in enumerate(container.get("volumeMounts") or []):
                if not isinstance(mount, dict) or mount.get("name") not in known:
                    raise field_problem(
                        (key, index, "volumeMounts", mount_index, "name"), "the name of a volume of pod.volumes or of the program's",
                        mount.get("name") if isinstance(mount, dict) else mount,
                    )
        return self


def _normalized(path: str) -> str:
    """The directory a mount path names: /a/../out, //out and /out/. all mount over /out."""
    return posixpath.normpath("/" + path.lstrip("/"))


def _lookup(document: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        document = document[part]
    return document
