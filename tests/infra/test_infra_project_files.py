"""Pulumi.yaml, __main__.py and the README's config reference agree with the config model."""

from __future__ import annotations

import importlib.util
import json
import runpy

import pulumi
import pytest
import yaml

import infra_harness as harness
from ddp_infra.config import StackConfig
from ddp_infra.config.nodes import NodeRange

PULUMI_TYPES = {int: "integer", bool: "boolean", str: "string"}


def project() -> dict:
    return yaml.safe_load((harness.REPO / "Pulumi.yaml").read_text())


@pulumi.runtime.test
def test_project_runs_python_from_the_venv_with_stacks_in_their_dir():
    document = project()
    assert document["name"] == harness.PROJECT
    assert document["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}}
    assert document["stackConfigDir"] == "stacks"


@pulumi.runtime.test
def test_every_model_key_is_declared_with_its_type_description_and_default():
    declared = project()["config"]
    fields = {field.alias: (name, field) for name, field in StackConfig.model_fields.items()}
    assert list(declared) == list(fields)
    for key, (name, field) in fields.items():
        declaration = declared[key]
        assert declaration["description"] == field.description, key
        if key == "hfToken":
            # Declared as a plain string with an empty default: a `secret: true` declaration would
            # make every stack set it; the program refuses a token that is not stored as a secret.
            assert declaration == {"type": "string", "description": field.description, "default": ""}
            continue
        if field.annotation in (int, NodeRange):
            # Untyped, so that the program, not the engine, answers a bad value with the range.
            assert "type" not in declaration, key
        else:
            assert declaration["type"] == PULUMI_TYPES.get(field.annotation, "object"), key
        if field.is_required():
            assert "default" not in declaration, key
        elif declaration.get("type") == "object":
            # {} must mean exactly the model's defaults.
            assert declaration["default"] == {}
            assert getattr(harness.stack_config.parse({key: {}, "image": {"name": "x"}}), name) == field.default
        else:
            default = str(field.default) if isinstance(field.default, NodeRange) else field.default
            assert declaration["default"] == default, key


@pytest.mark.parametrize("stack", harness.STACKS)
@pulumi.runtime.test
def test_main_exports_the_outputs(stack):
    monitor = harness.RecordingMonitor(harness.EchoMocks())
    pulumi.runtime.set_mocks(harness.EchoMocks(), project=harness.PROJECT, stack=stack, preview=False, monitor=monitor)
    pulumi.runtime.set_all_config(harness.engine_config(harness.stack_file_config(stack)))
    runpy.run_path(str(harness.REPO / "__main__.py"))
    exported = pulumi.runtime.settings.get_root_resource().outputs
    assert {"namespace", "workloadName", "masterAddress", "nodes", "worldSize", "kubectlWatchPods",
            "kubectlFollowRank0"} <= exported.keys()


@pulumi.runtime.test
def test_dev_renders_manifests_under_the_project_and_prod_applies_them():
    dev = harness.evaluate(harness.stack_file_config("dev"))
    # Relative, so a clone in another directory has the same provider config. The retained namespace
    # and claims render into a directory that sorts before the provider's 1-manifest/.
    assert dev.provider().inputs["renderYamlToDirectory"] == "rendered/dev"
    assert dev.provider("ddp-k8s-retained").inputs["renderYamlToDirectory"] == "rendered/dev/0-retained"
    prod = harness.evaluate(harness.stack_file_config("prod"), stack="prod")
    assert all("renderYamlToDirectory" not in p.inputs for p in prod.of_type("pulumi:providers:kubernetes"))


def config_reference():
    spec = importlib.util.spec_from_file_location("config_reference", harness.REPO / "scripts" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pulumi.runtime.test
def test_the_config_reference_is_generated_from_the_model():
    reference = config_reference()
    page = (harness.REPO / "docs" / "configuration.md").read_text()
    assert reference.START in page, "docs/configuration.md has no config-reference markers"
    assert reference.region(page) == reference.table(), "run scripts/config_reference.py --write docs/configuration.md"
    keys = [row[0] for row in reference.rows()]
    assert {"nodes", "storage.outputs.protect", "workload.waitFor", "hfToken"} <= set(keys)


@pulumi.runtime.test
def test_the_provider_config_does_not_depend_on_kubeconfigs_path(monkeypatch, tmp_path):
    """The SDK copies $KUBECONFIG into an explicit provider's inputs unless the program sets one:
    the state would then depend on the machine and directory a command ran in."""
    inputs = {}
    for where in ("here", "there"):
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / where / "kubeconfig"))
        inputs[where] = sorted(
            (stack, provider.name, json.dumps(provider.inputs, sort_keys=True))
            for stack in harness.STACKS
            for provider in harness.evaluate(harness.stack_file_config(stack), stack=stack).of_type("pulumi:providers:kubernetes")
        )
    assert inputs["here"] == inputs["there"]
    assert str(tmp_path) not in json.dumps(inputs), inputs


@pulumi.runtime.test
@pytest.mark.parametrize("retained", [True, False])
def test_in_render_mode_the_namespace_renders_where_kubectl_applies_it_first(retained):
    """`kubectl apply -R -f` applies files in name order; the namespace must come before what is in it.

    A retained namespace renders with the retained claims, its file (`v1-namespace-…`) before
    theirs (`v1-persistentvolumeclaim-…`); one that is not retained renders alone."""
    values = harness.stack_file_config("dev")
    if not retained:
        values = harness.stack_config_with("dev", storage__datasets__retainOnDelete="false",
                                           storage__outputs__retainOnDelete="false")  # fmt: skip
    evaluation = harness.evaluate(values)
    namespace = evaluation.one("kubernetes:core/v1:Namespace")
    own = evaluation.provider("ddp-k8s-retained" if retained else "ddp-k8s-namespace")
    assert namespace.provider.startswith(own.urn)
    directory = own.inputs["renderYamlToDirectory"]
    assert directory == ("rendered/dev/0-retained" if retained else "rendered/dev/0-namespace")
    assert f"{directory}/1-manifest" < "rendered/dev/1-manifest"
    assert "v1-namespace-" < "v1-persistentvolumeclaim-"
    prod = harness.evaluate(harness.stack_file_config("prod"), stack="prod")
    assert sorted(r.name for r in prod.of_type("pulumi:providers:kubernetes")) == ["ddp-k8s", "ddp-k8s-retained"], "no render provider on a cluster"
