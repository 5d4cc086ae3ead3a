"""ddp-infra's Pulumi program.

- `config`: the stack's configuration, one pydantic model, read and validated before anything
  is registered (`load`, `parse`, `ConfigError`).
- `world`: names, labels and the world's shape, computed once (`World`).
- `workload`, `manifests`: the Kubernetes objects as plain dicts, pure functions of the config
  and the world (`workload.pod_env` is the pod env the trainer image reads).
- `components`: one ComponentResource per concern, wiring those objects into Pulumi.
- `program`: the explicit Kubernetes provider and the whole stack (`build`).
"""
