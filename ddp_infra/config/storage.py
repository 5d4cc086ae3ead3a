"""`storage`: the claims mounted at /data, /out and /models, created by the stack or existing."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator
from pydantic.alias_generators import to_camel

from .scalars import DnsSubdomain, Model, StorageSize, field_problem


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


class DatasetsVolume(VolumeConfig):
    claim_name: DnsSubdomain = Field("datasets-pvc", description="Claim mounted at /data.")
    size: Optional[StorageSize] = Field("100Gi", description="Requested storage (required when create is true).")


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
