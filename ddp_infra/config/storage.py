"""`storage`: the claims mounted at /data, /out and /models, created by the stack or existing."""

from __future__ import annotations

import re
from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, Field, model_validator
from pydantic.alias_generators import to_camel

from trainer import fetch, object_store

from .scalars import DnsSubdomain, Model, StorageSize, field_problem, pattern


AccessMode = Literal["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"]


class VolumeConfig(Model):
    """A claim the stack creates, or an existing one it mounts (create: false)."""

    claim_name: DnsSubdomain
    create: bool = Field(True, description="Create the claim (false: mount an existing claim named claimName).")
    size: Optional[StorageSize] = Field(None, description="Requested storage, e.g. 100Gi (required when create is true).")
    storage_class: Optional[DnsSubdomain] = Field(None, description="StorageClass (unset: the cluster default).")
    access_mode: AccessMode = Field("ReadWriteOnce", description="Access mode; ReadWriteMany for multi-node.")
    retain_on_delete: bool = Field(
        True, description="Keep the claim in the cluster when Pulumi deletes it (destroy, rename)."
    )
    protect: bool = Field(False, description="Refuse any delete or replace of the claim in Pulumi.")

    @model_validator(mode="after")
    def _created_claims_have_a_size(self) -> "VolumeConfig":
        if self.create and self.size is None:
            raise field_problem(("size",), "a quantity such as 100Gi when create is true", None)
        if not self.create:
            for field in ("size", "storage_class"):
                if field in self.model_fields_set:
                    raise field_problem(
                        (to_camel(field),), "unset when create is false (an existing claim is used as it is)",
                        getattr(self, field),
                    )
        return self


_DIRECTORY = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"


class DataSource(Model):
    """What fills the datasets claim before the world trains (trainer/fetch.py, in each pod's
    fetch-data init container): fetched once, verified, unpacked; not fetched again while present."""

    url: Annotated[str, AfterValidator(pattern(
        r"https?://[^\s/?#]+[^\s]*|s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?",
        "an http:// or https:// URL without spaces, or s3://BUCKET/PREFIX/"))] = Field(
        description=f"An archive ({', '.join(fetch.ARCHIVE_SUFFIXES)}), unpacked into /data/<into>, or a file, copied there; "
        "or an object store prefix, s3://BUCKET/PREFIX/, its objects copied there at their paths below it."
    )  # fmt: skip
    sha256: Annotated[str, AfterValidator(pattern(r"[0-9a-f]{64}", "64 lowercase hexadecimal digits"))] = Field(
        description="The SHA-256 of what url serves, or of a prefix's tree (`python -m trainer.fetch --digest DIR`): "
        "a download that differs fails the world, and nothing on the claim changes."
    )
    endpoint: Optional[Annotated[str, AfterValidator(pattern(r"https?://[^\s/?#]+/?", "an http:// or https:// URL of a host, no path"))]] = Field(
        None, description="An S3-compatible service for an s3:// url (MinIO, Ceph, GCS's XML API, R2); unset: AWS's. "
        "Credentials: the AWS_* variables of env and secretEnv, or the pod's cloud identity."
    )
    into: Optional[Annotated[str, AfterValidator(pattern(_DIRECTORY, "a directory name: 1-128 of A-Z a-z 0-9 . _ -, starting alphanumeric"))]] = Field(
        None, description="The directory under /data it lands in (unset: the URL's file name without its archive suffix)."
    )

    @model_validator(mode="after")
    def _an_endpoint_serves_an_object_store(self) -> "DataSource":
        if self.endpoint is not None and not self.url.startswith(object_store.SCHEME):
            raise field_problem(("endpoint",), "unset for an http(s) url (an endpoint serves an s3:// source)", self.endpoint)
        return self

    @property
    def directory(self) -> str:
        if self.into:
            return self.into
        name = fetch.file_name(self.url)
        stem = next((name[: -len(suffix)] for suffix in fetch.ARCHIVE_SUFFIXES if name.endswith(suffix)), name)
        return stem if re.fullmatch(_DIRECTORY, stem) else "dataset"


class DatasetsVolume(VolumeConfig):
    claim_name: DnsSubdomain = Field("datasets-pvc", description="Claim mounted at /data.")
    size: Optional[StorageSize] = Field("100Gi", description="Requested storage (required when create is true).")
    source: Optional[DataSource] = Field(
        None, description="A dataset fetched onto the claim before the world trains: url, sha256, into, endpoint (see docs/architecture.md)."
    )

    @model_validator(mode="after")
    def _a_source_needs_a_writable_claim(self) -> "DatasetsVolume":
        if self.source is not None and self.access_mode == "ReadOnlyMany":
            raise field_problem(("accessMode",), "ReadWriteOnce, ReadWriteMany or ReadWriteOncePod with a source (the pods fill the claim)", self.access_mode)
        return self


class OutputsVolume(VolumeConfig):
    claim_name: DnsSubdomain = Field("outputs-pvc", description="Claim mounted at /out (checkpoints, results).")
    size: Optional[StorageSize] = Field("100Gi", description="Requested storage (required when create is true).")


class ModelsVolume(VolumeConfig):
    claim_name: DnsSubdomain = Field("models-pvc", description="Claim mounted at /models (local model snapshots).")


class StorageConfig(Model):
    datasets: DatasetsVolume = Field(DatasetsVolume(), description="Datasets volume, mounted at /data.")
    outputs: OutputsVolume = Field(OutputsVolume(), description="Outputs volume, mounted at /out.")
    models: Optional[ModelsVolume] = Field(None, description="Optional models volume, mounted at /models.")

    def volumes(self) -> dict[str, VolumeConfig]:
        """The configured volumes by role, in mount order."""
        roles = {"datasets": self.datasets, "outputs": self.outputs, "models": self.models}
        return {role: volume for role, volume in roles.items() if volume is not None}

    def created(self) -> list[VolumeConfig]:
        """The volumes whose claims the stack creates (not `create: false`)."""
        return [volume for volume in self.volumes().values() if volume.create]

    @property
    def namespace_retained(self) -> bool:
        """Deleting a namespace deletes every claim in it: it is kept when a claim in it is."""
        return any(volume.retain_on_delete for volume in self.created())

    @property
    def namespace_protected(self) -> bool:
        return any(volume.protect for volume in self.created())
