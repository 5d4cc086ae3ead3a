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
- `program`: the explicit Kubernetes providers and the whole stack (`build`).
"""
