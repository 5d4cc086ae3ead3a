"""The public component as a program of one's own uses it: `DdpTrainingWorld(name,
DdpTrainingWorldArgs(config=..., image=...), opts)`, its image handed in as another resource's
output, its config a mapping keyed as a stack file, the Kubernetes provider the caller's. Under
Pulumi's mocks (tests/infra/infra_harness.py); the cluster journey is
tests/cluster/test_cluster_package_world.py."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

import infra_harness as harness
from ddp_infra.components import DdpTrainingWorld, DdpTrainingWorldArgs
from ddp_infra.components.kubernetes_object import KubernetesObject
from ddp_infra.config import ConfigError
from ddp_infra.names import CONTAINER_NAME

IMAGE = "registry.example.com/team/trainer@sha256:" + "ab" * 32
STAND_IN = "stand-in.invalid"


def image_maker(image: str) -> KubernetesObject:
    """Another resource of the program whose output is the image (as a build step's would be)."""
    return KubernetesObject("image-record", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "image"}, "data": {"image": image}})


def program_of(make: Any):
    """A program of the test's own: `make()` adds what it adds and returns the outputs to record."""
    return lambda _: make()


def containers(evaluation: harness.Evaluation) -> list[dict[str, Any]]:
    spec = evaluation.pod_template["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_an_image_handed_in_as_another_resource_s_output_is_the_one_every_container_and_command_names():
    def program() -> dict[str, Any]:
        made = image_maker(IMAGE)
        config = harness.stack_config_with("dev", storage__datasets__source={"url": "https://data.example.com/corpus.tar.gz", "sha256": "0" * 64})
        world = DdpTrainingWorld("mine", DdpTrainingWorldArgs(config=config, image=made.data["image"]))  # type: ignore[attr-defined]
        return world.outputs

    evaluation = harness.evaluate(harness.stack_config_with("dev"), build=program_of(program))
    assert evaluation.error is None, evaluation.error
    images = {c["name"]: c["image"] for c in containers(evaluation)}
    assert CONTAINER_NAME in images and len(images) == 2, images  # the trainer and the fetch step
    assert set(images.values()) == {IMAGE}
    assert f"--image {IMAGE} " in evaluation.outputs["resultsCommand"]
    everything = repr([r.inputs for r in evaluation.registered]) + repr(evaluation.outputs)
    assert STAND_IN not in everything


def test_the_config_of_a_world_is_checked_by_the_stack_config_s_rules_each_problem_named_as_the_argument():
    config = harness.stack_config_with("dev", nodes="0", storage__outputs__size="lots")
    evaluation = harness.evaluate(
        harness.stack_config_with("dev"),
        build=program_of(lambda: DdpTrainingWorld("mine", DdpTrainingWorldArgs(config=config)).outputs),
    )
    assert isinstance(evaluation.error, ConfigError), evaluation.error
    message = str(evaluation.error)
    assert message.startswith("invalid arguments of ddp-infra:index:DdpTrainingWorld (2 problem(s)); nothing was created")
    assert "DdpTrainingWorldArgs.config.nodes: got " in message and "DdpTrainingWorldArgs.config.storage.outputs.size: got 'lots'" in message
    assert "ddp-infra:" not in message.replace("ddp-infra:index:", "")
    assert evaluation.registered == [], "refused before anything is registered"


@pytest.mark.parametrize("image", ["Trainer:latest", "registry.example.com/trainer:"])
def test_a_bad_image_is_refused_by_image_name_s_rule_as_a_string_before_anything_and_as_an_output_once_known(image):
    config = harness.stack_config_with("dev")
    plain = harness.evaluate(config, build=program_of(lambda: DdpTrainingWorld("w", DdpTrainingWorldArgs(config=config, image=image)).outputs))
    assert isinstance(plain.error, ConfigError) and plain.registered == [], plain.error
    assert f"DdpTrainingWorldArgs.image: got {image!r}; allowed: an image reference" in str(plain.error)

    def from_output() -> dict[str, Any]:
        return DdpTrainingWorld("w", DdpTrainingWorldArgs(config=config, image=image_maker(image).data["image"])).outputs  # type: ignore[attr-defined]

    late = harness.evaluate(config, build=program_of(from_output))
    assert f"DdpTrainingWorldArgs.image: got {image!r}; allowed: an image reference" in str(late.error), late.error
    assert not [r for r in late.registered if r.type == "kubernetes:batch/v1:Job"], "no workload of an unpullable image"


@pytest.mark.parametrize("handed", ["provider", "providers-list", "providers-map"])
def test_a_world_handed_the_caller_s_provider_makes_none_and_registers_every_object_with_it(handed):
    def program() -> dict[str, Any]:
        import pulumi_kubernetes as k8s

        cluster = k8s.Provider("cluster", kubeconfig="", context="theirs")
        kept = k8s.Provider("cluster-kept", kubeconfig="", context="theirs", enable_server_side_apply=True)
        opts = {
            "provider": pulumi.ResourceOptions(provider=cluster),
            "providers-list": pulumi.ResourceOptions(providers=[cluster]),
            "providers-map": pulumi.ResourceOptions(providers={"kubernetes": cluster}),
        }[handed]
        config = harness.stack_config_with("prod")
        return DdpTrainingWorld("mine", DdpTrainingWorldArgs(config=config, retained_provider=kept), opts=opts).outputs

    evaluation = harness.evaluate(harness.stack_config_with("prod"), stack="prod", build=program_of(program))
    assert evaluation.error is None, evaluation.error
    providers = {p.name: p for p in evaluation.of_type("pulumi:providers:kubernetes")}
    assert sorted(providers) == ["cluster", "cluster-kept"], "the world made none"
    objects = [r for r in evaluation.registered if r.type.startswith("kubernetes:")]
    assert {r.manifest["kind"] for r in objects} >= {"Namespace", "PersistentVolumeClaim", "Job", "Service"}
    for resource in objects:
        expected = providers["cluster-kept" if resource.retain_on_delete else "cluster"]
        assert resource.provider.startswith(expected.urn), (resource.name, resource.provider)
    assert any(r.retain_on_delete for r in objects), "the claims are kept, with the provider handed in for them"


SECRET = "kubernetes:core/v1:Secret"
TOKEN, KEY = "hf_HandedInPlainTextToTheWorld0123", "wandb-key-handed-in-plain-text"


def test_secrets_handed_in_as_plain_strings_are_made_pulumi_secrets_and_reach_only_their_secret_objects():
    def program() -> dict[str, Any]:
        config = harness.stack_config_with("dev")
        args = DdpTrainingWorldArgs(config=config, hf_token=TOKEN, secret_env={"WANDB_API_KEY": KEY})
        return DdpTrainingWorld("mine", args).outputs

    evaluation = harness.evaluate(harness.stack_config_with("dev"), build=program_of(program))
    assert evaluation.error is None, evaluation.error
    secrets = {r.name: r.manifest["stringData"] for r in evaluation.of_type(SECRET)}
    assert sorted(item for data in secrets.values() for item in data.items()) == [("WANDB_API_KEY", KEY), ("token", TOKEN)], secrets
    for resource in evaluation.registered:
        for value in (TOKEN, KEY):
            assert not harness.holds_in_plain_text(resource.inputs, value), f"{resource.name} holds a secret in plain text"
    assert evaluation.env["WANDB_API_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "WANDB_API_KEY"
    assert "HF_TOKEN" in evaluation.env


def test_a_bad_secret_env_name_handed_in_is_named_as_the_argument():
    config = harness.stack_config_with("dev")
    evaluation = harness.evaluate(config, build=program_of(
        lambda: DdpTrainingWorld("mine", DdpTrainingWorldArgs(config=config, secret_env={"9-lives": "x"})).outputs))
    assert isinstance(evaluation.error, ConfigError) and evaluation.registered == [], evaluation.error
    assert 'DdpTrainingWorldArgs.secret_env["9-lives"]: got ' in str(evaluation.error), evaluation.error


def storage_class_maker(name: str) -> KubernetesObject:
    """Another resource of the program whose output is the class's name (the program's EFS or Filestore class)."""
    return KubernetesObject("shared-class", {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                                             "provisioner": "efs.csi.aws.com"})  # fmt: skip


def test_a_storage_class_handed_in_as_an_output_is_every_claim_s_and_the_claims_record_s():
    def program() -> dict[str, Any]:
        made = storage_class_maker("shared-rwx")
        args = DdpTrainingWorldArgs(config=harness.stack_config_with("prod"), storage_class=made.metadata["name"])  # type: ignore[attr-defined]
        return DdpTrainingWorld("mine", args).outputs

    evaluation = harness.evaluate(harness.stack_config_with("prod"), stack="prod", build=program_of(program))
    assert evaluation.error is None, evaluation.error
    claims = [r.manifest for r in evaluation.registered if r.type == "kubernetes:core/v1:PersistentVolumeClaim"]
    assert len(claims) == 3 and {c["spec"]["storageClassName"] for c in claims} == {"shared-rwx"}, claims
    assert {record["storageClass"] for record in evaluation.outputs["claims"].values()} == {"shared-rwx"}
    assert STAND_IN not in repr([r.inputs for r in evaluation.registered]) + repr(evaluation.outputs)


def test_a_storage_class_handed_in_is_compared_by_its_value_with_the_last_deployment_s_claims():
    """The refusal of a claim change reads the value the Output resolves to, not its stand-in."""
    config = harness.stack_config_with("prod")
    last = harness.evaluate(config, stack="prod", build=program_of(
        lambda: DdpTrainingWorld("mine", DdpTrainingWorldArgs(config=config, outputs_prefix="")).outputs))
    for handed, refused in (("shared-rwx", False), ("another-class", True)):
        evaluation = harness.evaluate(config, stack="prod", previous_outputs=last.outputs, build=program_of(
            lambda: DdpTrainingWorld("mine", DdpTrainingWorldArgs(config=config, outputs_prefix="", storage_class=storage_class_maker(handed).metadata["name"])).outputs))  # type: ignore[attr-defined]  # noqa: B023
        assert ("refused: a claim cannot take this change" in str(evaluation.error)) is refused, (handed, evaluation.error)
        if refused:
            assert "storage.datasets.storageClass: 'shared-rwx' -> 'another-class'" in str(evaluation.error)


@pytest.mark.parametrize("selector, named", [({"pool": "not a label value!"}, 'DdpTrainingWorldArgs.node_selector["pool"]: got'),
                                             ({"bad key/with/slashes": "a"}, 'DdpTrainingWorldArgs.node_selector["bad key/with/slashes"] (its key): got')])  # fmt: skip
def test_a_bad_node_selector_handed_in_is_named_as_the_argument_before_anything(selector, named):
    config = harness.stack_config_with("dev")
    evaluation = harness.evaluate(config, build=program_of(
        lambda: DdpTrainingWorld("mine", DdpTrainingWorldArgs(config=config, node_selector=selector)).outputs))
    assert isinstance(evaluation.error, ConfigError) and evaluation.registered == [], evaluation.error
    assert named in str(evaluation.error), evaluation.error


@pytest.mark.parametrize("as_list", [True, False])
def test_every_object_of_a_world_waits_for_what_the_program_says_the_world_depends_on(as_list):
    """`opts.depends_on` (a list, or one resource): a namespace, a quota or a LocalQueue the program makes before the world."""
    made: dict[str, str] = {}

    def program() -> dict[str, Any]:
        quota = KubernetesObject("team-quota", {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team", "namespace": "ml"}})
        opts = pulumi.ResourceOptions(depends_on=[quota] if as_list else quota)
        world = DdpTrainingWorld("mine", DdpTrainingWorldArgs(config=harness.stack_config_with("prod")), opts=opts)
        quota.urn.apply(lambda urn: made.update(urn=urn))
        return world.outputs

    evaluation = harness.evaluate(harness.stack_config_with("prod"), stack="prod", build=program_of(program))
    assert evaluation.error is None, evaluation.error
    objects = [r for r in evaluation.registered if r.type.startswith("kubernetes:") and r.name != "team-quota"]
    assert len(objects) > 5
    late = [r.name for r in objects if made["urn"] not in r.dependencies]
    assert not late, f"created without waiting for what the world depends on: {late}"


def test_the_package_s_world_takes_the_engine_s_numbers_and_keeps_each_output_as_the_attribute_the_host_reads():
    """ddp_infra/package.py, as the component provider host constructs it: the inputs by their Python
    names, every number a float (a protobuf Value), the outputs read back from attributes."""
    from ddp_infra import package

    config = {**harness.stack_config_with("dev"), "nodes": 3.0, "shmSize": "256Mi"}
    seen: dict[str, Any] = {}

    def program() -> dict[str, Any]:
        world = package.DdpTrainingWorld("mine", {"config": config, "image": image_maker(IMAGE).data["image"]})  # type: ignore[attr-defined]
        for name in ("nodes", "workload_kind", "world_state", "results_command"):
            getattr(world, name).apply(lambda value, name=name: seen.update({name: value}))
        return world.outputs

    evaluation = harness.evaluate(harness.stack_config_with("dev"), build=program_of(program))
    assert evaluation.error is None, evaluation.error
    assert seen["nodes"] == 3 and seen["workload_kind"] == "job" and f"--image {IMAGE} " in seen["results_command"], seen
    assert package.whole_numbers({"a": [2.0, 2.5], "b": {"c": 1.0}, "d": "3"}) == {"a": [2, 2.5], "b": {"c": 1}, "d": "3"}
