"""ddp-infra as a Pulumi component package (ddp_infra/package.py, served by provider/): the schema the
real engine reads from the plugin names every argument and every output of the world, each with its
description, as the Python component's arguments and the stack's outputs are named."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import infra_harness as harness
from ddp_infra import package
from ddp_infra.components import training_world
from package_install import VERSION
from pulumi_project import REPO, PulumiProject

PLUGIN = REPO / "provider" / "pulumi-resource-ddp-infra"


def test_the_package_schema_names_every_argument_and_output_with_its_description(tmp_path):
    project = PulumiProject(tmp_path)
    done = subprocess.run([project.pulumi_bin, "package", "get-schema", str(PLUGIN)], cwd=tmp_path, env=project.env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    schema = json.loads(done.stdout)
    assert (schema["name"], schema["version"]) == ("ddp-infra", VERSION)
    world = schema["resources"][training_world.WORLD_TYPE]
    assert world["isComponent"] and world["description"]
    inputs, outputs = world["inputProperties"], world["properties"]
    assert all(spec.get("description") for spec in [*inputs.values(), *outputs.values()]), "each with its description"
    # The arguments another language can hand in: the Python component's, but the providers (resource options there).
    python_arguments = {field.name for field in dataclasses.fields(training_world.DdpTrainingWorldArgs)} - {"retained_provider", "previous_layout"}
    assert {package.pulumi_name_to_python(name) for name in inputs} == python_arguments
    assert world["requiredInputs"] == ["config"]
    # The outputs: the stack outputs of the repository's own world, by the same names.
    stack_outputs = set(harness.evaluated_with("dev").outputs)
    assert set(outputs) == stack_outputs, set(outputs) ^ stack_outputs
