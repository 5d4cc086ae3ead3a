"""The training world as a Pulumi component package, for programs in every Pulumi language.

`pulumi package add <repository>/provider` runs `provider/__main__.py`, which serves this module's
`DdpTrainingWorld` through Pulumi's component provider host: the engine reads the package's schema
from the annotations below (inputs, outputs and their descriptions), generates the program's SDK
and constructs the world in this process. It is the Python component itself (same class name, same
type token `ddp-infra:index:DdpTrainingWorld`), taking its arguments as the schema's inputs and
keeping each output as the attribute the host reads.

No `from __future__ import annotations` here: the host reads the annotations as types.
"""

from typing import Any, NotRequired, Optional, TypedDict

import pulumi

from .components import training_world


class DdpTrainingWorldArgs(TypedDict):
    """The schema's inputs: those of ddp_infra.components.training_world.DdpTrainingWorldArgs that another language can hand in (a
    program's own providers come through the resource options). Maps are plain: their values may be outputs."""

    config: dict[str, Any]
    """The world's settings: the stack config's keys without `ddp-infra:` (docs/configuration.md), e.g. {nodes: 4, namespace: {name: ml}}."""
    image: NotRequired[pulumi.Input[str]]
    """The trainer image, e.g. another resource's output; it takes the place of `image.name`."""
    storage_class: NotRequired[pulumi.Input[str]]
    """The StorageClass of every claim the world creates; it takes the place of each `storage.<role>.storageClass`."""
    node_selector: NotRequired[dict[str, pulumi.Input[str]]]
    """Node labels the pods must match, added to `scheduling.nodeSelector`."""
    hf_token: NotRequired[pulumi.Input[str]]
    """The Hugging Face token (config's `hfToken`), made a Pulumi secret."""
    secret_env: NotRequired[dict[str, pulumi.Input[str]]]
    """Env of the trainer read from a Secret (config's `secretEnv`), each value made a Pulumi secret."""
    outputs_prefix: NotRequired[str]
    """Where the program exports the world's outputs (`<name>.` unless set): the next run reads `claims` and `worldState` back from there."""


class DdpTrainingWorld(training_world.DdpTrainingWorld):
    """A multi-node PyTorch DDP training world on Kubernetes: its namespace, claims, secrets, rendezvous, guardrails and workload."""

    namespace: pulumi.Output[str]
    """The namespace the world lives in."""
    workload_kind: pulumi.Output[str]
    """The workload's kind: job, jobset or statefulset."""
    workload_name: pulumi.Output[str]
    """The workload's name."""
    master_address: pulumi.Output[str]
    """MASTER_ADDR: pod 0's DNS name."""
    rendezvous_endpoint: pulumi.Output[str]
    """torchrun's rendezvous endpoint."""
    nodes: pulumi.Output[Any]
    """The world's pods: a number, or MIN:MAX for an elastic world."""
    procs_per_node: pulumi.Output[int]
    """Processes per pod."""
    world_size: pulumi.Output[Any]
    """Processes in the world: a number, or MIN:MAX."""
    admission: pulumi.Output[str]
    """What the world's scheduler will do with it (admitted whole at N, or at MIN growing to MAX) and what a lost pod costs."""
    run_name: pulumi.Output[str]
    """The run's name: its directory on the outputs claim."""
    kubectl_watch_pods: pulumi.Output[str]
    """A kubectl command that watches the world's pods."""
    kubectl_follow_rank0: pulumi.Output[str]
    """A kubectl command that follows global rank 0's log."""
    kubectl_run_status: pulumi.Output[str]
    """A kubectl command that shows the workload's status."""
    pod_selector: pulumi.Output[str]
    """The label selector of the world's pods."""
    status_command: pulumi.Output[str]
    """The status view of the world (run from a checkout of ddp-infra)."""
    results_command: pulumi.Output[str]
    """Copies the run's results to ./results/<run> (run from a checkout of ddp-infra)."""
    claims: pulumi.Output[dict[str, Any]]
    """The claims the world creates, by role: what the next run's claim-change refusal compares."""
    world_state: pulumi.Output[str]
    """The world's state when `up` ended: admitted and running, queued, unschedulable, ... with the cluster's reason."""

    def __init__(self, name: str, args: DdpTrainingWorldArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(name, training_world.DdpTrainingWorldArgs(**{**args, "config": whole_numbers(args["config"])}), opts)
        for key, value in self.outputs.items():
            setattr(self, pulumi_name_to_python(key), pulumi.Output.from_input(value))


def whole_numbers(value: Any) -> Any:
    """`value` with each whole float an int: the engine hands every number over as a float (a
    protobuf Value), and a stack config's counts are integers (`nodes: 2` arrives as 2.0)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    return value


def pulumi_name_to_python(name: str) -> str:
    """`workloadKind` -> `workload_kind`: the attribute the host reads for each schema output."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)
