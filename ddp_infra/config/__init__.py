"""The stack's configuration: one pydantic model per concern, read from `pulumi.Config()`.

`load` reads and validates it and raises one `ConfigError` naming every problem (the full key,
the value given and what is allowed) before any resource is registered.
"""

from .problems import ConfigError, Problem
from .reading import load, parse
from .scalars import parse_quantity
from .stack import KubernetesConfig, NamespaceConfig, StackConfig
from .storage import StorageConfig, VolumeConfig
from .workload import WorkloadConfig

__all__ = [
    "ConfigError", "KubernetesConfig", "NamespaceConfig", "Problem", "StackConfig", "StorageConfig", "VolumeConfig",
    "WorkloadConfig", "load", "parse", "parse_quantity",
]
