"""ddp-infra's Pulumi program, in layers that only look down:

- `names`: what the program calls things (container, volumes, mounts, labels, annotations, resources).
- `config`: the stack's configuration, one pydantic model per concern, read and validated before
  anything is registered (`load`, `parse`, `ConfigError`).
- `world`: the world's names, labels and shape, computed once from the config (`World`).
- `claim_changes`, `reachability`: the checks that run before anything is registered.
- `pod`, `workload`, `gang`, `manifests`: the Kubernetes objects as plain dicts, pure functions of
  the world (`pod.pod_env` is the pod env the trainer image reads; `pod.pod_template` the one
  template every workload kind and the PodGroup run).
- `components`: one ComponentResource per concern, wiring those objects into Pulumi.
- `providers`: a world's Kubernetes providers, the caller's or its own.
- `program`: the stack's one world, from the stack's config (`build`).

The package's public component, `DdpTrainingWorld` and its `DdpTrainingWorldArgs`, is importable from
here; it is loaded on first use, so that the modules the trainer image and the commands import alone
(`names`, `config`) do not load Pulumi's resource machinery.
"""

from typing import Any

__all__ = ["DdpTrainingWorld", "DdpTrainingWorldArgs"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from .components import training_world

        return getattr(training_world, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
