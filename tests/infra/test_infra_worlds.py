"""A world's resources are named after it: two worlds live in one program, and the stack's own
world takes over what ddp-infra 0.1.0 deployed (its resources then named by role alone) through
aliases. The 0.1.0 layout is read from the states that version deployed (tests/engine/states/0.1.0/,
`pulumi stack export` after its `pulumi up` of each stack in render mode); test_engine_upgrade.py
previews them with the real engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

import infra_harness as harness
from ddp_infra import config as stack_config
from ddp_infra import program
from ddp_infra.components import DdpTrainingWorld, DdpTrainingWorldArgs
from ddp_infra.components.training_world import LAYOUT_0_1_TYPE, WORLD_TYPE, checked_world, layout_0_1_name
from pulumi_project import resource_name, resource_type

STATES_0_1 = Path(__file__).resolve().parents[1] / "engine" / "states" / "0.1.0"
# What each recorded state's stack file said besides the committed one (prod rendered, not applied).
RECORDED_WITH = {"dev": {}, "prod": {"kubernetes__renderDir": "rendered/prod"}}
# Read, not registered (the mocks see no StackReference): the stack's reference to its last deployment.
READ_NOT_REGISTERED = ("pulumi:pulumi:Stack", "pulumi:providers:pulumi", "pulumi:pulumi:StackReference")


def recorded_resources(stack: str) -> set[tuple[str, str]]:
    """(type, name) of each resource of the program in the state 0.1.0 deployed."""
    state = json.loads((STATES_0_1 / f"{stack}.json").read_text())
    urns = [resource["urn"] for resource in state["deployment"]["resources"]]
    return {(resource_type(urn), resource_name(urn)) for urn in urns if not resource_type(urn).startswith(READ_NOT_REGISTERED)}


def former_identities(resource: harness.Registered) -> set[tuple[str, str]]:
    """Every (type, name) the engine may take for this resource in an older state: its own and its aliases'."""
    return {(type_, name) for type_ in (resource.type, *resource.alias_types) for name in (resource.name, *resource.alias_names)}


@pytest.mark.parametrize("stack", sorted(RECORDED_WITH))
def test_each_resource_0_1_deployed_is_taken_over_by_exactly_one_resource_of_the_world_named_after_it(stack):
    evaluation = harness.evaluated_with(stack, **RECORDED_WITH[stack])
    recorded = recorded_resources(stack)
    for resource in evaluation.registered:
        matched = former_identities(resource) & recorded
        assert len(matched) == 1, (resource.type, resource.name, sorted(former_identities(resource)))
        recorded -= matched
        if resource.type == "pulumi:providers:kubernetes":  # the program's, not the world's
            continue
        assert resource.name == program.WORLD_NAME or resource.name.startswith(f"{program.WORLD_NAME}-"), resource.name
    assert not recorded, f"resources 0.1.0 deployed that nothing takes over (the upgrade would delete them): {sorted(recorded)}"
    (world,) = evaluation.of_type(WORLD_TYPE)
    assert world.alias_types == [LAYOUT_0_1_TYPE]


SWEEP = {"sweep-a": {"namespace__name": "sweep-a", "run__name": "lr-3e-4"},
         "sweep-b": {"namespace__name": "sweep-b", "run__name": "lr-1e-3", "nodes": "3"}}  # fmt: skip


def two_worlds(_: Any) -> dict[str, Any]:
    """A program of its own: two worlds of a sweep, each in its namespace, on the program's one provider."""
    cluster = k8s.Provider("cluster", render_yaml_to_directory="rendered/sweep")
    outputs: dict[str, Any] = {}
    for name, changes in SWEEP.items():
        config = harness.stack_config_with("dev", **changes)
        world = DdpTrainingWorld(name, DdpTrainingWorldArgs(config=config), opts=pulumi.ResourceOptions(provider=cluster))
        outputs.update({f"{world.outputs_prefix}{key}": value for key, value in world.outputs.items()})
    return outputs


def test_two_worlds_in_one_program_have_resources_of_their_own_and_outputs_of_their_own():
    evaluation = harness.evaluate(harness.stack_config_with("dev"), build=two_worlds)
    assert evaluation.error is None, evaluation.error
    urns = [resource.urn for resource in evaluation.registered]
    assert len(urns) == len(set(urns)), "no two resources share a URN"
    mine = {name: [r for r in evaluation.registered if r.name == name or r.name.startswith(f"{name}-")] for name in SWEEP}
    theirs = [r for r in evaluation.registered if not any(r in found for found in mine.values())]
    assert [(r.type, r.name) for r in theirs] == [("pulumi:providers:kubernetes", "cluster")], "only the program's own"
    assert sorted(r.type for r in mine["sweep-a"]) == sorted(r.type for r in mine["sweep-b"]), "the same world twice"
    assert not any(r.alias_names or r.alias_types for world in mine.values() for r in world if r.type.startswith("ddp-infra:"))
    for name, changes in SWEEP.items():
        assert evaluation.outputs[f"{name}.namespace"] == changes["namespace__name"]
        assert evaluation.outputs[f"{name}.runName"] == changes["run__name"]
        assert evaluation.outputs[f"{name}.claims"]["outputs"]["claim"].startswith(f"{name}/")
        workload = next(r for r in mine[name] if r.type == "kubernetes:batch/v1:Job").manifest
        assert workload["metadata"]["namespace"] == name
    assert evaluation.outputs["sweep-b.nodes"] == 3 and evaluation.outputs["sweep-a.nodes"] == 2


def test_the_0_1_names_of_what_no_recorded_state_holds_follow_the_same_rule():
    """Volcano's pod group and the namespace had names of their own; a world's own name and another
    world's resources have none."""
    world = harness.evaluated_with("dev", scheduling__gang__scheduler="volcano")
    former = layout_0_1_name("ddp", checked_world(stack_config.parse(harness.stack_config_with("dev")))[0])
    assert [former(name) for name in ("ddp-trainer-pod-group", "ddp-namespace", "ddp-storage-outputs", "ddp", "sweep-a-storage")] \
        == ["pod-group", "ddp-dev", "storage-outputs", None, None]
    (pod_group,) = [r for r in world.registered if r.name == "ddp-trainer-pod-group"]
    assert pod_group.alias_names == ["pod-group"]
